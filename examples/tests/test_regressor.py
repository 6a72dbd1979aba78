"""Tests of the regressor and its training step."""

from __future__ import annotations

import io

import torch
from models import MLPRegressor, train_step

from pytest_torch import assert_close


def test_training_reduces_the_loss(regressor, make_tensor):
    inputs = make_tensor(64, 16)
    targets = inputs.sum(dim=1) / 4
    optimizer = torch.optim.Adam(regressor.parameters(), lr=1e-2)
    losses = [train_step(regressor, optimizer, inputs, targets) for _ in range(30)]
    assert losses[-1] < losses[0] / 4, losses


def test_state_dict_round_trip_keeps_every_tensor(regressor, torch_device):
    buffer = io.BytesIO()
    torch.save(regressor.state_dict(), buffer)
    buffer.seek(0)
    restored = MLPRegressor().to(torch_device)
    restored.load_state_dict(torch.load(buffer, map_location=torch_device))
    # nested outputs are compared tensor by tensor, and a mismatch names the key
    assert_close(restored.state_dict(), regressor.state_dict(), rtol=0, atol=0)
