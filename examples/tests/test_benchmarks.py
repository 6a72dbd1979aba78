"""Benchmark suites: each model over batch sizes, dtypes and torch.compile.

Run with `pytest --torch-benchmark` (add --torch-benchmark-plot=DIR and
--torch-benchmark-json=PATH for pictures and figures); a plain `pytest` deselects them.
"""

from __future__ import annotations

import torch
from models import TinyCNN, TransformerBlock

from pytest_torch import benchmark_suite


@benchmark_suite(
    batch_sizes=(1, 8, 32),
    dtypes=("float32", "bfloat16"),
    modes=("eager", "compile"),
)
def test_tiny_cnn(batch_size):
    return TinyCNN(), torch.randn(batch_size, 1, 28, 28)


@benchmark_suite(batch_sizes=(1, 8, 32), dtypes=("float32", "bfloat16"))
def test_transformer_block(batch_size):
    # 64 tokens of width 64 per sample
    return TransformerBlock(), torch.randn(batch_size, 64, 64)
