"""The plugin in real runs: CPU thread shares across xdist workers and the thread marker.

xdist needs real processes, so runs with workers are subprocesses."""

from __future__ import annotations

import json
import os

import pytest
import torch

from pytest_torch.core.cpus import available_cores

THREAD_REPORT = """
import json, os, pytest, torch


def report(name):
    with open(os.environ["THREAD_LOG"], "a") as out:
        out.write(json.dumps({
            "test": name,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "threads": torch.get_num_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS"),
        }) + "\\n")


@pytest.mark.parametrize("i", range(4))
def test_share(i):
    report(f"share{i}")


@pytest.mark.torch_threads(1)
def test_pinned():
    report("pinned")
"""


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def thread_suite(pytester, monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    log = pytester.path / "threads.jsonl"
    monkeypatch.setenv("THREAD_LOG", str(log))
    pytester.makepyfile(test_threads=THREAD_REPORT)
    return log


def test_auto_gives_each_worker_its_share_and_the_marker_pins_one_test(thread_suite, run_workers):
    result = run_workers()
    result.assert_outcomes(passed=5)
    share = max(1, available_cores() // 2)
    result.stdout.fnmatch_lines(
        [
            f"torch xdist: 2 workers, {available_cores()} cores available",
            f"  gw0: no GPU assigned, {share} of {available_cores()} threads",
            f"  gw1: no GPU assigned, {share} of {available_cores()} threads",
        ]
    )
    records = _lines(thread_suite)
    shares = [r for r in records if r["test"].startswith("share")]
    assert {r["worker"] for r in records} <= {"gw0", "gw1"}
    assert all(r["threads"] == share and r["omp"] == str(share) for r in shares), records
    (pinned,) = [r for r in records if r["test"] == "pinned"]
    assert pinned["threads"] == 1


def test_a_count_applies_with_and_without_workers(thread_suite, run_workers, pytester):
    run_workers("--torch-num-threads=1").assert_outcomes(passed=5)
    assert {r["threads"] for r in _lines(thread_suite)} == {1}
    thread_suite.unlink()
    result = pytester.runpytest_subprocess("-p", "torch_xdist", "--torch-num-threads=1")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines([f"torch threads: 1 of {available_cores()} threads*"])
    assert {r["threads"] for r in _lines(thread_suite)} == {1}


def test_none_and_user_variables_leave_torch_alone(thread_suite, run_workers, monkeypatch):
    result = run_workers("--torch-num-threads=none")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["  gw0: no GPU assigned, torch's default threads*"])
    assert {r["omp"] for r in _lines(thread_suite) if r["test"] != "pinned"} == {None}
    thread_suite.unlink()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_workers()
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["  gw0: no GPU assigned, threads left to OMP_NUM_THREADS=1"])
    assert {(r["omp"], r["threads"]) for r in _lines(thread_suite)} == {("1", 1)}


def test_without_workers_the_plugin_is_silent_and_changes_nothing(thread_suite, run):
    threads_before = torch.get_num_threads()
    result = run("-p", "no:xdist")
    result.assert_outcomes(passed=5)
    result.stdout.no_fnmatch_line("torch xdist*")
    result.stdout.no_fnmatch_line("torch threads*")
    records = _lines(thread_suite)
    assert {r["threads"] for r in records if r["test"] != "pinned"} == {threads_before}
    assert torch.get_num_threads() == threads_before  # the pin was undone
    assert "OMP_NUM_THREADS" not in os.environ


def test_oversubscription_is_warned_about(pytester, run):
    pytester.makepyfile("def test_nothing(): pass")
    count = available_cores() + 1
    result = run(f"--torch-num-threads={count}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"torch threads: {count} of {available_cores()} threads (--torch-num-threads)",
            f"  WARNING: --torch-num-threads={count}: {count} threads on {available_cores()}"
            " available core*; oversubscribed threads wait for each other*",
        ]
    )


def test_markers_and_options_are_documented(pytester, run):
    result = run("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.torch_gpu_exclusive: *", "@pytest.mark.torch_threads(n): *"]
    )
    result = run("--help")
    result.stdout.fnmatch_lines(
        ["torch-xdist: GPUs and CPU cores shared by workers:", "*--torch-num-threads=N*"]
    )


def test_bad_thread_marker_is_a_collection_error(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_threads(0)
        def test_pinned():
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*::test_pinned: @pytest.mark.torch_threads needs a positive*"])


def test_the_thread_marker_pins_a_unittest_method_too(pytester, run):
    # unittest.TestCase methods never reach pytest_generate_tests, where the marker is
    # otherwise seen; a suite of them alone must still get the pin
    pytester.makepyfile(
        """
        import unittest

        import pytest
        import torch

        BEFORE = torch.get_num_threads()

        class TestKernels(unittest.TestCase):
            @pytest.mark.torch_threads(1)
            def test_pinned(self):
                self.assertEqual(torch.get_num_threads(), 1)

            @pytest.mark.torch_threads(0)
            def test_bad_marker(self):
                pass

            def test_z_restored(self):
                self.assertEqual(torch.get_num_threads(), BEFORE)
        """
    )
    result = run("--torch-num-threads=2", "-p", "no:randomly")
    result.assert_outcomes(passed=2, errors=1)  # the bad marker: at its set-up
    result.stdout.fnmatch_lines(
        ["*::TestKernels::test_bad_marker: @pytest.mark.torch_threads needs a positive*"]
    )


def test_workers_of_a_torch_free_suite_never_import_torch(pytester, run_workers, monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(
        """
        import os, sys

        def test_no_torch():
            assert "torch" not in sys.modules
            assert os.environ["OMP_NUM_THREADS"]  # the share is set for when it comes

        def test_no_torch_either():
            assert "torch" not in sys.modules
        """
    )
    run_workers().assert_outcomes(passed=2)
