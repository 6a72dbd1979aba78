"""Two small models a real project might have: an image classifier and a regressor."""

from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    """A 10-class classifier for 1x28x28 images."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.dropout = nn.Dropout(0.25)
        self.head = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.features(images).flatten(1)))


class MLPRegressor(nn.Module):
    """Predicts one value from 16 features."""

    def __init__(self, in_features: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features).squeeze(-1)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> float:
    """One optimisation step; returns the loss as a Python float (never the tensor)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item()


class TransformerBlock(nn.Module):
    """One pre-norm transformer encoder block: attention and an MLP, with residuals."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.norm1(tokens)
        tokens = tokens + self.attention(x, x, x, need_weights=False)[0]
        return tokens + self.mlp(self.norm2(tokens))
