"""diagnose_nondeterminism on real models, one per verdict, run as a pytest suite."""

from __future__ import annotations

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

MODELS = """
import pytest
import torch

from pytest_torch.determinism import diagnose_nondeterminism
from pytest_torch.determinism import flags


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(4, 8)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


class ReadsUninitialised(torch.nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], 16)
        out[:, :8] = x  # the other half is never written
        return out.sum(dim=1)


class ScattersIntoGarbage(torch.nn.Module):
    # kernel-level variance (racy_sum) and a read of uninitialised memory at once

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 1)

    def forward(self, x):
        values = self.proj(x.repeat(500, 1)).flatten() * 1e3
        sums = torch.ops.pytest_torch_tests.racy_sum(values, torch.arange(values.numel()) % 3, 3)
        out = torch.empty(6)
        out[:3] = sums  # the other half is never written
        return out.sum()


class ResizesInPlace(torch.nn.Module):
    def forward(self, x):
        out = x.sum(dim=1).clone()
        out.resize_(2 * out.numel())  # the new half holds whatever was there
        return out


class Drifts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 2)
        self.calls = 0  # Python-side state: no buffer, no RNG

    def forward(self, x):
        self.calls += 1
        return self.head(x) * self.calls


class Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        self.steps += 1
        return x * self.steps


class Scatters(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.proj = torch.nn.Linear(8, 1)
        self.op = op

    def forward(self, x):
        values = self.proj(x.repeat(500, 1)).flatten() * 1e3
        return self.op(values, torch.arange(values.numel()) % 3, 3)


def test_deterministic(x):
    result = diagnose_nondeterminism(mlp(), x)
    assert result.category == "Deterministic" and result.deterministic
    assert result.verdict == "Deterministic: 5 runs gave bitwise identical outputs."
    assert result.first_divergence is None
    assert [(t.name, t.runs, t.outcome) for t in result.trials] == [
        ("as called", 5, "identical"),
        ("reseeded, uninitialised memory filled with 0x3F", 1, "identical"),
        ("reseeded, uninitialised memory filled with 0xC1 (vs 0x3F)", 1, "identical"),
    ]


def test_randomness_driven_names_dropout(x):
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2)
    ).train()
    result = diagnose_nondeterminism(model, x)
    assert result.verdict.startswith(
        "Randomness-driven: the variance disappears when the RNG is reseeded before each run."
    )
    assert "bernoulli_ in `2` (Dropout)" in result.verdict
    assert "call model.eval() to turn dropout off" in result.verdict
    assert result.first_divergence == "`2` (Dropout)"  # the Linear before it agrees


def test_randomness_in_plain_callables(x):
    result = diagnose_nondeterminism(lambda t: t + torch.randn(()), x, runs=3)
    assert result.category == "Randomness-driven"
    assert result.random_ops == ["randn"]
    assert result.first_divergence is None  # not a module


def test_uninitialised_memory_is_not_blamed_on_kernels(x):
    result = diagnose_nondeterminism(ReadsUninitialised(), x)
    assert result.category == "Uninitialised memory"
    assert "initialise the tensor (torch.zeros)" in result.verdict
    assert "--torch-deterministic" not in result.verdict  # it would only hide the bug
    assert "wrote 0x3F into it in one run, 0xC1 in another" in result.verdict
    assert result.first_divergence == "the model (ReadsUninitialised)"


@pytest.mark.parametrize("fill", [True, False])
def test_uninitialised_memory_under_the_users_deterministic_mode(x, fill):
    # torch's own fill (NaN) makes the runs identical; the probe's bytes replace it
    with flags.using(flags.deterministic(fill_uninitialized_memory=fill)):
        assert diagnose_nondeterminism(ReadsUninitialised(), x).category == "Uninitialised memory"
        assert diagnose_nondeterminism(mlp(), x).category == "Deterministic"


def test_uninitialised_memory_behind_kernel_level_variance(x):
    result = diagnose_nondeterminism(ScattersIntoGarbage(), x)
    assert result.category == "Uninitialised memory", str(result)
    assert "otherwise vary with what that memory held" in result.verdict
    assert [(t.name, t.outcome) for t in result.trials][-2:] == [
        ("reseeded, deterministic algorithms, uninitialised memory filled with 0x3F", "identical"),
        ("reseeded, deterministic algorithms, uninitialised memory filled with 0xC1 (vs 0x3F)", "varies"),
    ]
    assert result.first_divergence == "the model (ScattersIntoGarbage)"  # proj agrees


def test_bytes_added_by_resize_are_uninitialised(x):
    assert diagnose_nondeterminism(ResizesInPlace(), x).category == "Uninitialised memory"


def test_python_side_drift_is_outside_torch(x):
    model = Drifts()
    result = diagnose_nondeterminism(model, x)
    assert result.category == "Outside torch"
    assert result.first_divergence == "the model (Drifts)"
    assert [t.outcome for t in result.trials][-1] == "varies"


def test_state_mutation_names_the_buffer_and_restores_it(x):
    model = Counts()
    result = diagnose_nondeterminism(model, x)
    assert result.category == "State mutation"
    assert result.changed_state == ["buffer `steps`"]
    assert "(buffer `steps`)" in result.verdict
    assert model.steps.item() == 0


def test_kernel_level_fixed_by_deterministic_algorithms(x):
    result = diagnose_nondeterminism(Scatters(torch.ops.pytest_torch_tests.racy_sum), x)
    assert result.category == "Kernel-level"
    assert "disappears with torch.use_deterministic_algorithms(True)" in result.verdict
    assert [(t.name, t.runs, t.outcome) for t in result.trials][2:] == [
        ("reseeded, deterministic algorithms, uninitialised memory filled with 0x3F", 5, "identical"),
        ("reseeded, deterministic algorithms, uninitialised memory filled with 0xC1 (vs 0x3F)", 1, "identical"),
    ]
    assert "--torch-deterministic" in result.verdict
    assert result.first_divergence == "the model (Scatters)"  # proj agrees in every run


def test_kernel_level_op_without_a_deterministic_implementation(x):
    result = diagnose_nondeterminism(Scatters(torch.ops.pytest_torch_tests.fast_scatter), x)
    assert result.category == "Kernel-level"
    assert "fast_scatter_cpu has no deterministic implementation" in result.verdict
    assert "--torch-deterministic cannot fix it" in result.verdict
    assert result.trials[-1].outcome == "raised"


def test_facts_and_report(x):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).train()
    result = diagnose_nondeterminism(model, x, runs=3)
    names = [t.name for t in result.trials]
    assert names == ["as called", "RNG reseeded before each run"]
    assert len(result.trials[0].max_differences) == 2 and result.trials[0].max_differences[0] > 0
    assert result.trials[1].max_differences == [0.0, 0.0]
    report = str(result)
    assert report.startswith(result.verdict)
    assert "First divergence: `1` (Dropout)" in report
    assert "  setting" in report and "  RNG reseeded before each run     3  identical  0, 0" in report


def test_everything_is_restored_even_when_a_run_raises(x):
    rng = torch.get_rng_state()
    switches = flags.current()
    calls = []

    def sometimes_fails(t):
        calls.append(1)
        if len(calls) == 7:
            raise ValueError("run 7 broke")
        return t + torch.rand(())

    with pytest.raises(ValueError, match="run 7 broke"):
        diagnose_nondeterminism(sometimes_fails, x)
    assert torch.equal(torch.get_rng_state(), rng)
    assert flags.current() == switches
    assert not torch.are_deterministic_algorithms_enabled()


class AddsToItsInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x, *, scale):
        scale += 1  # in place, into the caller's tensor
        return self.head(x) * scale


class FunctionalDropout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.dropout(self.proj(x), 0.5, training=True)


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return torch.distributions.Categorical(logits=self.head(x))


def test_a_call_that_writes_into_its_inputs(x):
    scale = torch.ones(1)
    result = diagnose_nondeterminism(AddsToItsInput(), x, scale=scale)
    assert result.category == "Changes its inputs", str(result)
    assert result.verdict.startswith(
        "Changes its inputs: the outputs change because the call writes into its own inputs"
        " in place (input `kwargs['scale']`), so no two calls get the same inputs; with the"
        " original inputs restored before each run the outputs are identical."
    )
    assert "eval()" not in result.verdict
    assert [t.name for t in result.trials] == ["as called", "inputs restored before each run"]
    assert result.changed_state == ["input `kwargs['scale']`"]
    assert scale.item() == 1.0  # restored


def test_functional_dropout_in_eval_is_not_told_to_call_eval(x):
    result = diagnose_nondeterminism(FunctionalDropout().eval(), x)
    assert result.category == "Randomness-driven"
    assert result.random_ops == [
        "bernoulli_ in the model (FunctionalDropout), called by F.dropout(..., training=True)"
    ]
    assert (
        "F.dropout(..., training=True) in the model (FunctionalDropout) drops elements at random"
        " although that module is in eval mode: model.eval() does not affect a dropout function"
        " called with training=True; pass training=self.training."
    ) in result.verdict
    assert "call model.eval() to turn dropout off" not in result.verdict


def test_other_random_ops_are_named_with_their_submodule(x):
    class Noise(torch.nn.Module):
        def forward(self, t):
            return t + torch.randn(t.shape)

    result = diagnose_nondeterminism(torch.nn.Sequential(torch.nn.Linear(8, 8), Noise()).eval(), x)
    assert result.random_ops == ["randn in `1` (Noise)"]
    assert result.verdict.endswith(
        "Seed before each call (the torch_seed fixture does), or draw from a seeded"
        " torch.Generator (generator=..., where the op takes one): randn in `1` (Noise)."
    )


def test_a_distribution_is_compared_by_its_parameters(x):
    assert diagnose_nondeterminism(Policy(), x).category == "Deterministic"


def test_outputs_that_cannot_be_compared_stop_the_diagnosis(x):
    from pytest_torch.determinism.outputs import CannotCompare

    with pytest.raises(CannotCompare, match=r"^diagnose_nondeterminism: cannot compare generator at output\\['steps'\\]"):
        diagnose_nondeterminism(lambda t: {"steps": (s for s in t)}, x)


def test_bad_arguments(x):
    with pytest.raises(ValueError, match="runs >= 2"):
        diagnose_nondeterminism(mlp(), x, runs=1)
    with pytest.raises(TypeError, match="expects a torch.nn.Module or a callable"):
        diagnose_nondeterminism(torch.ones(1), x)
"""


def test_every_verdict_on_real_models(pytester, run):
    pytester.makepyfile(test_models=MODELS)
    result = run("-v")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=20)


@pytest.mark.accelerator
def test_on_an_accelerator_dropout_is_randomness_and_an_eval_model_deterministic(accelerator):
    """The device's own generator is reseeded with the CPU's: dropout on the device is
    named as randomness, not as a kernel that varies."""
    import torch

    from pytest_torch.determinism import assert_deterministic, diagnose_nondeterminism

    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2)
    ).to(accelerator)
    x = torch.randn(4, 8, device=accelerator)
    result = diagnose_nondeterminism(model.train(), x)
    assert result.category == "Randomness-driven", str(result)
    assert result.first_divergence == "`2` (Dropout)"
    assert_deterministic(model.eval(), x)
