"""Speed checks: a latency budget, per-machine baselines, and no hidden host syncs."""

from __future__ import annotations

import pytest
import torch
from models import MLPRegressor, train_step

from pytest_torch import assert_no_host_sync


@pytest.mark.torch_max_latency(ms=250)
def test_classifier_answers_a_batch_within_budget(classifier, make_tensor, latency):
    result = latency(classifier, make_tensor(8, 1, 28, 28))
    print(result.describe())


@pytest.mark.torch_max_latency(ms=500, stat="p90")
def test_training_step_within_budget(regressor, make_tensor, latency):
    optimizer = torch.optim.SGD(regressor.parameters(), lr=1e-3)
    inputs, targets = make_tensor(64, 16), make_tensor(64)
    latency(train_step, regressor, optimizer, inputs, targets)


@pytest.mark.parametrize("batch", [1, 64])
def test_regressor_speed_does_not_regress(make_tensor, perf_baseline, torch_device, batch):
    model = MLPRegressor().to(torch_device)
    perf_baseline(model, make_tensor(batch, 16), latency_tolerance=0.5)


def predicted_classes(logits: torch.Tensor) -> torch.Tensor:
    # stays on the device: no .item(), no boolean indexing
    return torch.where(logits.max(dim=1).values > 0, logits.argmax(dim=1), -1)


def test_inference_path_never_waits_for_the_device(classifier, make_tensor):
    images = make_tensor(4, 1, 28, 28)
    with torch.no_grad():
        classes = assert_no_host_sync(lambda: predicted_classes(classifier(images)))
    assert classes.shape == (4,)
