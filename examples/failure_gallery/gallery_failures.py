"""What failures look like: every test here fails on purpose.

Run by ``python failure_gallery.py`` (part of the demo); not part of the example suite.
"""

from __future__ import annotations

import pytest
import torch
from models import MLPRegressor, TinyCNN

from pytest_torch import (
    assert_close,
    assert_deterministic,
    assert_no_graph_breaks,
    assert_no_host_sync,
    diagnose_nondeterminism,
)


def test_quantised_weights_drift(torch_device):
    model = MLPRegressor().to(torch_device)
    reference = {name: p.detach().clone() for name, p in model.state_dict().items()}
    with torch.no_grad():
        for param in model.parameters():  # a lossy round trip through bfloat16
            param.copy_(param.to(torch.bfloat16).to(param.dtype))
        model.net[0].bias[3] += 0.25  # and one real bug
    # bfloat16's default tolerances accept the rounding, so only the bug is reported
    assert_close(model.state_dict(), reference, rtol=1.6e-2, atol=1e-5)


def test_loss_becomes_nan(torch_seed, make_tensor):
    preds = make_tensor(2, 4)
    targets = preds.clone()
    preds[1, 2] = float("nan")
    assert_close(preds, targets)


@pytest.mark.torch_max_latency(ms=0.001)
def test_model_over_its_latency_budget(make_tensor, latency):
    latency(MLPRegressor(), make_tensor(256, 16))


def confident_predictions(logits):
    confident = logits[logits.softmax(dim=1).max(dim=1).values > 0.5]  # data-dependent shape
    if not confident.any():  # reads a value on the host
        return None
    return confident.argmax(dim=1).tolist()  # copies to the host


def test_postprocessing_waits_for_the_device(make_tensor):
    assert_no_host_sync(confident_predictions, make_tensor(16, 10))


@pytest.mark.torch_max_memory(mb=4)
def test_a_big_batch_over_its_memory_budget(make_tensor):
    model = TinyCNN()
    model(make_tensor(256, 1, 28, 28))  # with autograd on, every activation is kept


def test_training_mode_predictions_are_not_reproducible(make_tensor):
    assert_deterministic(TinyCNN().train(), make_tensor(8, 1, 28, 28))


def test_why_training_mode_is_not_reproducible(make_tensor):
    diagnosis = diagnose_nondeterminism(TinyCNN().train(), make_tensor(8, 1, 28, 28))
    if not diagnosis.deterministic:
        pytest.fail(str(diagnosis), pytrace=False)  # the diagnosis is the whole report


class CheckedRegressor(MLPRegressor):
    """Guards against NaN predictions and logs each batch: two graph breaks."""

    def forward(self, features):
        predictions = super().forward(features)
        if torch.isnan(predictions).any():  # a Python branch on a tensor's value
            raise ValueError("NaN prediction")
        print(f"predicted {predictions.shape[0]} values")
        return predictions


def test_compiled_regressor_breaks_its_graph(make_tensor):
    assert_no_graph_breaks(CheckedRegressor().eval(), make_tensor(8, 16))


@pytest.mark.torch_compile_budget(recompiles=0)
def test_serving_recompiles_for_a_new_batch_size(make_tensor):
    serve = torch.compile(MLPRegressor().eval(), backend="eager")
    with torch.no_grad():
        for batch in (8, 16):  # a new batch size compiles the model again
            serve(make_tensor(batch, 16))
