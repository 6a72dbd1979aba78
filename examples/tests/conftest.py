"""Fixtures shared by the example tests.

`torch_device` is session-scoped, so a model can be built once per module and device.
"""

from __future__ import annotations

import pytest
import torch
from models import MLPRegressor, TinyCNN


@pytest.fixture(scope="module")
def classifier(torch_device):
    torch.manual_seed(0)  # weights independent of test order; the state is restored below
    model = TinyCNN().to(torch_device).eval()
    return model


@pytest.fixture
def regressor(torch_seed, torch_device):
    # function-scoped: training changes the weights, and every test starts afresh
    return MLPRegressor().to(torch_device)


@pytest.fixture(autouse=True, scope="module")
def _restore_global_rng():
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)
