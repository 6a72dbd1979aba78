"""Plugins of the family working together."""

from __future__ import annotations

import json

import pytest


def test_perf_baselines_recorded_by_xdist_workers_are_written_once(pytester, quiet_machine):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_speed(perf_baseline, n):
            perf_baseline(lambda: sum(range(10 * n)))
        """
    )
    plugins = ("-p", "torch_perf", "-p", "xdist", "-p", "torch_xdist", "-n", "2")
    result = pytester.runpytest(*plugins, "--torch-update-perf", "--torch-perf-max-time=0.05")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["recorded 4 perf baseline(s) for this machine in *"])
    (machine,) = json.loads((pytester.path / ".torch-perf-baselines.json").read_text())[
        "machines"
    ].values()
    assert len(machine) == 4 and {entry["threads"] for entry in machine.values()} == {1}
    # the workers run torch on their share of the cores; measurements on one thread
    pytester.runpytest(*plugins, "--torch-perf-max-time=0.05").assert_outcomes(passed=4)


def test_memory_peaks_follow_the_worker_device_and_reach_the_controller(pytester):
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.torch_max_memory(mb=64)
        @pytest.mark.parametrize("mb", [1, 2])
        def test_alloc(mb):
            torch.ones(mb * 2**20, dtype=torch.uint8)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "torch_memory", "-p", "xdist", "-p", "torch_xdist", "-n", "2"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["torch xdist: 2 workers*", "*- torch memory: highest peaks -*"])


NESTED = """
import pytest, torch

@pytest.mark.torch_max_memory(mb={budget}, device="{device}")
def test_step(perf_baseline):
    big = torch.empty(64 * 2**20, dtype=torch.uint8, device="{device}")
    del big  # the body's peak: 64 MiB, before the perf call opens its own window
    like = torch.empty(1, dtype=torch.uint8, device="{device}")
    # the call's device: that of the tensor its closure holds
    perf_baseline(lambda: torch.empty(2**20, dtype=torch.uint8, device=like.device))
"""


def _nested_run(pytester, device):
    pytester.makepyfile(NESTED.format(budget=32, device=device))
    plugins = ("-p", "torch_perf", "-p", "torch_memory", "--torch-perf-max-time=0.05")
    result = pytester.runpytest(*plugins, "--torch-update-perf")
    result.assert_outcomes(failed=1)
    # the perf call's window inside the test's did not hide the 64 MiB seen before it
    # (what earlier tests of this process left alive counts as "at start", not "added")
    result.stdout.fnmatch_lines(
        [
            f"peak memory on {device}* was *, over the torch_max_memory budget of 32 MiB*",
            "  added by the test body at its peak:            64.0 MiB",
        ]
    )
    (machine,) = json.loads((pytester.path / ".torch-perf-baselines.json").read_text())[
        "machines"
    ].values()
    (entry,) = machine.values()
    (peak,) = entry["peak_memory"].values()  # the inner window was measured too
    assert 2**20 <= peak < 8 * 2**20


def test_a_perf_baseline_inside_a_memory_budget_measures_both(pytester, quiet_machine):
    _nested_run(pytester, "cpu")


@pytest.mark.accelerator
def test_a_perf_baseline_inside_a_memory_budget_on_an_accelerator(
    pytester, quiet_machine, accelerator
):
    """An accelerator has one peak counter per device: the perf call's reset must not
    erase the outer budget's 64 MiB."""
    _nested_run(pytester, accelerator)


@pytest.mark.usefixtures("torch_seed")  # the inner test draws from the global generator
def test_the_compile_table_reaches_the_job_summary_and_the_html_report(pytester, monkeypatch):
    pytest.importorskip("pytest_html", reason="needs pytest-html installed")
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.torch_compile_budget(recompiles=1)
        def test_compiled():
            model = torch.compile(torch.nn.Linear(4, 4), backend="eager")
            model(torch.randn(8, 4))
            model(torch.randn(16, 4))
        """
    )
    plugins = ("-p", "torch_perf", "-p", "torch_ci", "-p", "metadata", "-p", "html")
    result = pytester.runpytest(
        *plugins, "--torch-github-annotations", "--html=report.html", "--self-contained-html"
    )
    result.assert_outcomes(passed=1)
    text = summary.read_text()
    assert "torch compile" in text
    assert "test_compiled" in text.split("torch compile", 1)[1]
    page = (pytester.path / "report.html").read_text()
    assert "<h2>pytest-torch: torch compile</h2><pre>test" in page


def test_distributed_tests_run_on_rank_pools_of_each_xdist_worker(pytester):
    """Each xdist worker is the controller of its own tests' rank pools; a failure names
    its rank, and the controller's end-of-run line counts every worker's tests."""
    pytester.makepyfile(
        """
        import pytest, torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2)
        @pytest.mark.parametrize("n", range(3))
        def test_all_reduce(rank, world_size, n):
            total = torch.tensor([float(rank + n)])
            dist.all_reduce(total)
            assert total.item() == 1 + 2 * n and world_size == 2

        @pytest.mark.torch_distributed(world_size=2)
        def test_rank_one_fails(rank):
            assert rank == 0

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "torch_distributed", "-p", "xdist", "-p", "torch_xdist", "-n", "2", "-rf"
    )
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        [
            "torch xdist: 2 workers*",
            "*rank 1 of 2 failed: assert 1 == 0; rank 0 passed it*",
            "torch: 4 tests ran on torch.distributed ranks (2 ranks, gloo on cpu: 4)*",
            "FAILED *::test_rank_one_fails*",
        ]
    )
