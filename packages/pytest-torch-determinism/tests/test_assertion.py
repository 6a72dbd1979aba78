"""assert_deterministic on real models and training steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from pytest_torch.determinism import NondeterminismError, assert_deterministic
from pytest_torch.determinism import flags as determinism_flags
from pytest_torch.determinism.assertion import InputsChangedWarning
from pytest_torch.determinism.outputs import CannotCompare

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def test_a_deterministic_model_passes_and_returns_the_first_output():
    model, x = _mlp(), torch.randn(4, 8)
    output = assert_deterministic(model, x, runs=3)
    assert torch.equal(output, model(x))


def test_a_whole_training_step_on_fresh_copies_is_compared_with_its_gradients():
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 2)

    def step():
        fresh = copy.deepcopy(model)
        optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
        loss = F.mse_loss(fresh(x), y)
        loss.backward()
        grads = {name: p.grad for name, p in fresh.named_parameters()}
        optimizer.step()
        return {"loss": loss.item(), "grads": grads, "params": dict(fresh.named_parameters())}

    assert_deterministic(step)


def test_a_failure_names_the_output_the_run_and_the_next_step():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()

    def forward(x):
        return {"logits": model(x), "tag": "same"}

    with pytest.raises(NondeterminismError) as info:
        assert_deterministic(forward, torch.randn(4, 8))
    message = str(info.value)
    assert message.startswith(
        "not deterministic: run 2 of 5 differs from run 1 (same inputs, compared bitwise):"
    )
    assert "\n  output['logits']: " in message and " of 32 elements differ (max abs" in message
    assert "diagnose_nondeterminism(model, *inputs)" in message


def test_tolerances_accept_small_differences():
    noise = iter([0.0, 1e-3, -1e-3])
    assert_deterministic(lambda: torch.ones(3) + next(noise), runs=3, atol=1e-2)
    noise = iter([0.0, 1e-3])
    with pytest.raises(NondeterminismError, match=r"compared with atol=0\.0001, rtol=0"):
        assert_deterministic(lambda: torch.ones(3) + next(noise), runs=2, atol=1e-4)


class NoisyNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4)  # updates its running statistics when called

    def forward(self, x):
        return self.norm(x) + torch.rand(1)


def test_global_state_and_the_model_are_as_before():
    model = NoisyNorm().train()
    x = torch.randn(8, 4)
    before = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    switches = determinism_flags.current()
    with pytest.raises(NondeterminismError):
        assert_deterministic(model, x)
    assert torch.equal(torch.get_rng_state(), rng)
    assert determinism_flags.current() == switches
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"runs": 1}, "runs >= 2"), ({"atol": -1}, "atol must be a number >= 0")],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        assert_deterministic(lambda: 1, **kwargs)


class AddsToItsInput(torch.nn.Module):
    def forward(self, x, *, bias):
        x.add_(1.0)
        bias.mul_(2.0)
        return x * 2 + bias


def test_a_call_that_writes_into_its_inputs_is_compared_on_the_original_inputs():
    x, bias = torch.randn(4), torch.ones(4)
    original = x.clone()
    with pytest.warns(InputsChangedWarning) as record:
        output = assert_deterministic(AddsToItsInput(), x, bias=bias, runs=3)
    assert str(record[0].message).startswith(
        "assert_deterministic: the call writes into its own inputs (input `inputs[0]`, input"
        " `kwargs['bias']`): each run got the original values back, and the outputs agree"
    )
    # afterwards the inputs hold what one call left, and the output is that call's
    assert torch.equal(x, original + 1) and torch.equal(bias, torch.full((4,), 2.0))
    assert torch.equal(output, (original + 1) * 2 + 2)


def test_a_failure_with_changed_inputs_says_they_were_restored():
    def noisy(x):
        x.add_(1.0)
        return x + torch.rand(())

    with pytest.raises(NondeterminismError) as info:
        assert_deterministic(noisy, torch.zeros(3))
    assert str(info.value).startswith(
        "not deterministic: run 2 of 5 differs from run 1 (the same inputs: the call writes into"
        " input `inputs[0]`, so each run got the original values back, compared bitwise):"
    )


def test_outputs_that_cannot_be_compared_get_no_verdict():
    with pytest.raises(CannotCompare) as info:
        assert_deterministic(lambda: (t for t in torch.ones(2)))
    assert str(info.value).startswith(
        "assert_deterministic: cannot compare generator at output: an iterator"
    )
    assert not isinstance(info.value, AssertionError)  # an error of the test, not a verdict


def test_the_models_own_error_passes_on_with_the_run():
    calls = []

    def second_call_fails(x):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("cache miss")
        return x

    with pytest.raises(KeyError, match="cache miss") as info:
        assert_deterministic(second_call_fails, torch.ones(1))
    assert "assert_deterministic: raised in run 2 of 5" in getattr(info.value, "__notes__", [""])
