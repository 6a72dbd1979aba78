"""--torch-deterministic in real runs: applied through torch_seed, restored after."""

from __future__ import annotations

import os

import pytest
import torch

SUITE = """
import os
import torch


def test_seeded(torch_seed):
    assert torch.are_deterministic_algorithms_enabled() is {expected}
    assert torch.is_deterministic_algorithms_warn_only_enabled() is {warn_only}
    assert torch.backends.cudnn.deterministic is {expected}
    assert torch.backends.cudnn.benchmark is False
    assert (os.environ.get("CUBLAS_WORKSPACE_CONFIG") == ":4096:8") is {expected}


def test_unseeded_tests_are_left_alone():
    assert not torch.are_deterministic_algorithms_enabled()


def test_after_a_seeded_test_everything_is_back(torch_seed):
    pass


def test_z_restored():
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic
"""


@pytest.fixture(autouse=True)
def _no_cublas_setting(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)


def _suite(pytester, expected: bool, warn_only: bool = False) -> None:
    pytester.makepyfile(test_suite=SUITE.format(expected=expected, warn_only=warn_only))


def test_off_by_default(pytester, run):
    _suite(pytester, expected=False)
    run().assert_outcomes(passed=4)


def test_flag_turns_deterministic_mode_on_for_seeded_tests(pytester, run):
    _suite(pytester, expected=True)
    result = run("--torch-deterministic")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["torch: deterministic algorithms for tests using torch_seed"])
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # the session put it back
    assert not torch.are_deterministic_algorithms_enabled()


def test_warn_only_and_the_ini_twins(pytester, run):
    _suite(pytester, expected=True, warn_only=True)
    pytester.makeini("[pytest]\ntorch_deterministic = true\ntorch_deterministic_warn_only = true\n")
    result = run()
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["torch: deterministic algorithms (warn only) for tests*"])


def test_an_existing_cublas_setting_is_kept(pytester, run, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    pytester.makepyfile(
        """
        import os

        def test_kept(torch_seed):
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
        """
    )
    run("--torch-deterministic").assert_outcomes(passed=1)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_an_op_without_a_deterministic_implementation_fails_the_test(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_scatter(torch_seed):
            values = torch.ones(6)
            torch.ops.pytest_torch_tests.fast_scatter(values, torch.arange(6) % 2, 2)
        """
    )
    result = run("--torch-deterministic")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fast_scatter_cpu does not have a deterministic implementation*"])
    run("--torch-deterministic", "--torch-deterministic-warn-only")  # (the op raises itself)


def test_options_are_listed(pytester, run):
    result = run("--help")
    result.stdout.fnmatch_lines(
        [
            "torch-determinism: deterministic mode:",
            "  --torch-deterministic",
            "*--torch-deterministic-warn-only*",
        ]
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_cuda_nondeterminism_is_kernel_level():
    from pytest_torch.determinism import diagnose_nondeterminism

    torch.manual_seed(0)
    index = torch.randint(0, 8, (1 << 20,), device="cuda")
    values = torch.randn(1 << 20, device="cuda")

    def index_add(v):
        return torch.zeros(8, device="cuda").index_add_(0, index, v)

    def scatter_add(v):
        return torch.zeros(8, device="cuda").scatter_add_(0, index, v)

    for fn in (index_add, scatter_add):
        result = diagnose_nondeterminism(fn, values, runs=10)
        assert result.category == "Kernel-level", (fn.__name__, str(result))
    assert not torch.are_deterministic_algorithms_enabled()
