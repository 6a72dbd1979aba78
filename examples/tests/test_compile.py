"""torch.compile health: the shipped models compile into one graph, and serving or
training does not recompile as batch sizes change."""

from __future__ import annotations

import pytest
import torch
from models import MLPRegressor, TransformerBlock

from pytest_torch import assert_no_graph_breaks


def test_classifier_compiles_into_one_graph(classifier, make_tensor):
    with torch.no_grad():
        assert_no_graph_breaks(classifier, make_tensor(4, 1, 28, 28))


def test_transformer_block_compiles_into_one_graph(make_tensor):
    assert_no_graph_breaks(TransformerBlock().eval(), make_tensor(2, 16, 64))


@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0)
def test_serving_batches_of_any_size_compiles_once(make_tensor):
    # eager backend: the test checks what torch.compile traces, cheaply, on any device
    serve = torch.compile(TransformerBlock().eval(), backend="eager")
    first = make_tensor(8, 16, 64)
    torch._dynamo.mark_dynamic(first, 0)  # the batch size varies: one graph for all
    with torch.no_grad():
        for tokens in (first, make_tensor(32, 16, 64), make_tensor(3, 16, 64)):
            assert serve(tokens).shape == tokens.shape


@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0)
def test_training_steps_compile_once(regressor, make_tensor):
    model = torch.compile(regressor, backend="eager")
    optimizer = torch.optim.AdamW(regressor.parameters(), lr=1e-3)
    for _ in range(3):  # the same shapes every step: compiled once, reused
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(make_tensor(64, 16)), make_tensor(64))
        loss.backward()
        optimizer.step()


def test_regressor_compiles_into_one_graph(make_tensor):
    assert_no_graph_breaks(MLPRegressor().eval(), make_tensor(8, 16))
