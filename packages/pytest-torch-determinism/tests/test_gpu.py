"""The CUDA paths on a real GPU: cuBLAS's CUBLAS_WORKSPACE_CONFIG, the uninitialised-
memory probe with the caching allocator, cuDNN's flags.

torch reads CUBLAS_WORKSPACE_CONFIG once per process, at the first CUDA matrix product,
so every test that depends on that moment runs pytest in a fresh process
(runpytest_subprocess); the others run here, with CUDA initialised by the ``cuda``
fixture before the state guard records anything.
"""

from __future__ import annotations

import os

import pytest
import torch

from pytest_torch.determinism import diagnose_nondeterminism

pytestmark = pytest.mark.cuda(
    reason="cuBLAS workspace settings, cuDNN flags and the caching allocator's reused memory"
)

BINNED = """
import torch


class Binned(torch.nn.Module):
    # a cuBLAS matrix product, then atomic float additions in another order on every run
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        values = self.proj(x).flatten()
        index = torch.arange(values.numel(), device=values.device) % 8
        return torch.zeros(8, device=values.device).index_add_(0, index, values)


def binned_on_cuda():
    torch.manual_seed(0)
    return Binned().cuda(), torch.randn(1 << 14, 64, device="cuda")
"""


@pytest.fixture(autouse=True)
def _no_cublas_setting(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)


def _fresh_process(pytester, *args):
    """pytest in a new process, so the first CUDA matrix product happens in it."""
    return pytester.runpytest_subprocess("-p", "torch_determinism", "-s", *args)


def test_diagnosis_of_a_cuda_linear_model_without_cublas_setting(pytester):
    pytester.makepyfile(binned=BINNED)
    pytester.makepyfile(
        test_it="""
        import os
        import torch
        from binned import binned_on_cuda
        from pytest_torch.determinism import diagnose_nondeterminism

        def test_diagnosis():
            assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
            model, x = binned_on_cuda()
            result = diagnose_nondeterminism(model, x, runs=10)
            print(result)
            assert result.category == "Kernel-level", str(result)
            assert "disappears with torch.use_deterministic_algorithms(True)" in result.verdict
            assert "Caveat" not in str(result)
            assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
            assert not torch.are_deterministic_algorithms_enabled()
        """
    )
    result = _fresh_process(pytester)
    result.assert_outcomes(passed=1)


def test_a_cublas_refusal_is_reported_with_the_fix(pytester):
    pytester.makepyfile(binned=BINNED)
    pytester.makepyfile(
        test_it="""
        import torch
        from binned import binned_on_cuda
        from pytest_torch.determinism import diagnose_nondeterminism

        def test_diagnosis():
            model, x = binned_on_cuda()
            model(x).sum().item()  # the first matrix product: torch reads the unset variable
            result = diagnose_nondeterminism(model, x, runs=10)
            print(result)
            assert result.category == "Inconclusive", str(result)
            assert "Export CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting Python" in result.verdict
            assert result.trials[-1].cublas_refused
            assert not torch.are_deterministic_algorithms_enabled()
        """
    )
    result = _fresh_process(pytester)
    result.assert_outcomes(passed=1)


AT_EXIT = """
import atexit
import os


def _report():
    print(f"at exit: CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG')}")


atexit.register(_report)
"""


def test_torch_deterministic_on_a_cuda_gemm(pytester):
    pytester.makeconftest(AT_EXIT)
    pytester.makepyfile(
        """
        import os
        import torch

        def test_gemm(torch_seed):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            assert torch.are_deterministic_algorithms_enabled()
            linear = torch.nn.Linear(512, 512).cuda()
            a = torch.randn(512, 512, device="cuda")
            first = linear(a @ a)
            assert torch.equal(first, linear(a @ a))

        def test_z_unseeded_tests_are_left_alone():
            assert not torch.are_deterministic_algorithms_enabled()
        """
    )
    result = _fresh_process(pytester, "--torch-deterministic")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "torch: CUBLAS_WORKSPACE_CONFIG=:4096:8 (set for this session)",
            "at exit: CUBLAS_WORKSPACE_CONFIG=None",  # restored by the plugin
        ]
    )
    assert "PytestConfigWarning" not in result.stdout.str()


def test_an_exported_bad_value_warns_in_the_header(pytester, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:2")  # valid for cuBLAS, not deterministic
    pytester.makepyfile(
        """
        import torch

        def test_gemm(torch_seed):
            a = torch.ones(64, 64, device="cuda")
            (a @ a).sum().item()
        """
    )
    result = _fresh_process(pytester, "--torch-deterministic")
    result.assert_outcomes(failed=1)  # torch refuses the product, as the header said
    result.stdout.fnmatch_lines(
        [
            "torch: CUBLAS_WORKSPACE_CONFIG=':4096:2' is exported, which is not deterministic:"
            " export CUBLAS_WORKSPACE_CONFIG=:4096:8 instead (see the warning)",
            "*CUBLAS_WORKSPACE_CONFIG=:4096:8 or CUBLAS_WORKSPACE_CONFIG=:16:8*",
            "*PytestConfigWarning: --torch-deterministic: CUBLAS_WORKSPACE_CONFIG=':4096:2' is"
            " exported, but torch accepts only :4096:8 or :16:8*",
        ]
    )
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:2"


def test_cudnn_flags_are_restored_after_a_cuda_conv(pytester):
    pytester.makeconftest(
        """
        import pytest
        import torch

        @pytest.fixture(scope="session", autouse=True)
        def _benchmark_on():
            before = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            yield
            torch.backends.cudnn.benchmark = before
        """
    )
    pytester.makepyfile(
        """
        import torch

        def _step(conv, x):
            conv.zero_grad()
            out = conv(x)
            out.square().sum().backward()
            return out, conv.weight.grad.clone()

        def test_a_conv(torch_seed):
            assert torch.backends.cudnn.deterministic is True
            assert torch.backends.cudnn.benchmark is False
            conv = torch.nn.Conv2d(16, 32, 3).cuda()
            x = torch.randn(8, 16, 64, 64, device="cuda")
            first, second = _step(conv, x), _step(conv, x)
            assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])

        def test_b_flags_back():
            assert torch.backends.cudnn.deterministic is False
            assert torch.backends.cudnn.benchmark is True
            assert not torch.are_deterministic_algorithms_enabled()
        """
    )
    result = _fresh_process(pytester, "--torch-deterministic")
    result.assert_outcomes(passed=2)


class ReadsUninitialised(torch.nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], 16, device=x.device)
        out[:, :8] = x * 2  # the other half is never written
        return out.sum(dim=1)


def test_the_probe_finds_uninitialised_memory_on_cuda(cuda, torch_seed):
    x = torch.randn(64, 8, device=cuda)
    result = diagnose_nondeterminism(ReadsUninitialised(), x)
    assert result.category == "Uninitialised memory", str(result)
    assert result.first_divergence == "the model (ReadsUninitialised)"


def test_the_probe_says_clean_for_a_clean_cuda_model(cuda, torch_seed):
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to(
        cuda
    )
    x = torch.randn(64, 8, device=cuda)
    result = diagnose_nondeterminism(model, x)
    assert result.category == "Deterministic", str(result)
    assert [t.outcome for t in result.trials] == ["identical"] * 3


def test_a_cuda_diagnosis_in_a_process_that_already_used_cuda(cuda, torch_seed):
    index = torch.randint(0, 8, (1 << 20,), device=cuda)
    values = torch.randn(1 << 20, device=cuda)
    result = diagnose_nondeterminism(
        lambda v: torch.zeros(8, device=cuda).index_add_(0, index, v), values, runs=10
    )
    assert result.category == "Kernel-level", str(result)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
