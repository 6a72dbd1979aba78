"""Plugins of the family working together."""

from __future__ import annotations

import json


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
