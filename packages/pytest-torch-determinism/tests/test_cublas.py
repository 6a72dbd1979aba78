"""CUBLAS_WORKSPACE_CONFIG in diagnose_nondeterminism, with torch's check faked on CPU.

torch reads the variable once per process, at the first CUDA matrix product, and from
then on refuses every matrix product under deterministic algorithms unless that value
was :4096:8 or :16:8. FakeCuBLAS does the same with a plain matrix product.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from pytest_torch.determinism import cublas, diagnose_nondeterminism

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

TORCH_MESSAGE = (
    "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)`"
    " or `at::Context::setDeterministicAlgorithms(true)`, but this operation is not"
    " deterministic because it uses CuBLAS and you have CUDA >= 10.2. To enable deterministic"
    " behavior in this case, you must set an environment variable before running your PyTorch"
    " application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or CUBLAS_WORKSPACE_CONFIG=:16:8. For more"
    " information, go to https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility"
)


class FakeCuBLAS:
    def __init__(self):
        self.first: list[str | None] = []  # the value at the first product, once read
        self.seen: list[str | None] = []

    def mm(self, a, b):
        if not self.first:
            self.first.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        self.seen.append(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
        if torch.are_deterministic_algorithms_enabled() and not cublas.is_deterministic(
            self.first[0]
        ):
            raise RuntimeError(TORCH_MESSAGE)
        return a @ b


class Binned(torch.nn.Module):
    """A matrix product, then a sum whose order varies unless deterministic mode is on."""

    def __init__(self, blas):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 1))
        self.blas = blas

    def forward(self, x):
        values = self.blas.mm(x.repeat(500, 1), self.weight).flatten() * 1e3
        return torch.ops.pytest_torch_tests.racy_sum(values, torch.arange(values.numel()) % 3, 3)


@pytest.fixture
def x():
    return torch.randn(4, 8)


@pytest.fixture(autouse=True)
def _unset(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    # CUDA as a fresh process sees it, whatever ran before in this one (GPU tests)
    monkeypatch.setattr(cublas, "cuda_initialised", lambda: False)


def test_set_from_the_first_run_and_removed_after(x):
    blas = FakeCuBLAS()
    result = diagnose_nondeterminism(Binned(blas), x)
    assert result.category == "Kernel-level", str(result)
    assert "disappears with torch.use_deterministic_algorithms(True)" in result.verdict
    assert blas.first == [":4096:8"]  # the first run is not a deterministic one
    assert set(blas.seen) == {":4096:8"}
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert "Caveat" not in str(result)


@pytest.mark.parametrize(
    ("exported", "during"), [(":0:0", ":4096:8"), ("", ":4096:8"), (":16:8", ":16:8")]
)
def test_an_exported_value(x, monkeypatch, exported, during):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", exported)
    blas = FakeCuBLAS()
    assert diagnose_nondeterminism(Binned(blas), x).category == "Kernel-level"
    assert set(blas.seen) == {during}
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == exported


def test_a_refusal_is_reported_with_the_fix_not_raised(x):
    blas = FakeCuBLAS()
    blas.mm(torch.ones(1, 1), torch.ones(1, 1))  # an earlier product read the unset variable
    result = diagnose_nondeterminism(Binned(blas), x)
    assert result.category == "Inconclusive"
    assert result.verdict.startswith(
        "Inconclusive: the variance stays when the RNG is reseeded, and the experiment with"
        " deterministic algorithms could not run: torch refused a CUDA matrix product under"
        " deterministic algorithms because CUBLAS_WORKSPACE_CONFIG was not :4096:8 or :16:8"
        " when this process ran its first CUDA matrix product"
    )
    assert "Export CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python" in result.verdict
    last = result.trials[-1]
    assert (last.outcome, last.error, last.cublas_refused) == (
        "raised",
        "cuBLAS refused deterministic mode (CUBLAS_WORKSPACE_CONFIG)",
        True,
    )
    assert "raised: cuBLAS refused deterministic mode (CUBLAS_WORKSPACE_CONFIG)" in str(result)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert not torch.are_deterministic_algorithms_enabled()


def test_cuda_initialised_before_the_diagnosis_is_no_reason_for_doubt(x, monkeypatch):
    """Moving a model to the GPU initialises CUDA; if no matrix product ran before, the
    variable set now is read in time, and if one did, torch refuses (Inconclusive): a
    verdict is never hedged."""
    monkeypatch.setattr(cublas, "cuda_initialised", lambda: True)
    result = diagnose_nondeterminism(Binned(FakeCuBLAS()), x)
    assert result.category == "Kernel-level"
    assert "Caveat" not in str(result)


def test_restored_when_a_run_raises(x):
    calls = []

    def breaks(t):
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("run 3 broke")
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        return t + torch.rand(())

    with pytest.raises(ValueError, match="run 3 broke"):
        diagnose_nondeterminism(breaks, x)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_cuda_initialised_never_imports_torch(monkeypatch):
    monkeypatch.undo()  # the real function
    with monkeypatch.context() as patch:  # torch is back before torch_seed's teardown
        patch.delitem(sys.modules, "torch")
        assert cublas.cuda_initialised() is False
        assert "torch" not in sys.modules


def test_refusals_are_told_apart():
    assert cublas.refused(RuntimeError(TORCH_MESSAGE))
    assert not cublas.refused(
        RuntimeError("index_add_cuda_ does not have a deterministic implementation")
    )
