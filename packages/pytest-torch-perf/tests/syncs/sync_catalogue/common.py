"""What the catalogue's patterns are made of: the Pattern record, small models and data."""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Pattern:
    """One labelled pattern.

    ``syncs`` and ``reason`` describe the pattern on CUDA tensors. ``build(device)`` makes
    the models and data on ``device`` and returns the code that is judged. ``operations``
    lists, most important first, the operations a detector should report when it syncs.
    """

    name: str
    area: str
    syncs: bool
    reason: str
    build: Callable[[torch.device], Callable[[], object]]
    operations: tuple[str, ...] = ()
    #: why a CPU-only run cannot tell, "" when it can: a tensor made on the host before
    #: the judged code looks like any other input there
    hidden_on_cpu: str = ""


Build = Callable[[torch.device], Callable[[], object]]
MakeOptimizer = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]


class MLP(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TokenClassifier(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens).mean(dim=1))


class PositionalEncoding(nn.Module):
    def __init__(self, dim: int = 16, max_len: int = 64) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        frequency = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        pe = torch.zeros(1, max_len, dim)
        pe[0, :, 0::2] = torch.sin(position * frequency)
        pe[0, :, 1::2] = torch.cos(position * frequency)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.pe[:, : x.size(1)].to(x.device)


def _batch(device: torch.device, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 16, device=device), torch.randint(0, 10, (n,), device=device)


def _padding_mask(lengths: torch.Tensor, length: int) -> torch.Tensor:
    """True at the padded positions of right-padded sequences."""
    return torch.arange(length, device=lengths.device) >= lengths[:, None]


def _string_logger(level: int) -> logging.Logger:
    logger = logging.Logger("sync_catalogue", level)
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    return logger


def _eval_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    logits = torch.randn(32, 10, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    return logits, y, F.cross_entropy(logits, y)
