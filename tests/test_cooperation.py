"""Plugins of the family working together."""

from __future__ import annotations

import pytest


def test_perf_baselines_are_not_recorded_under_xdist_workers(pytester):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest(
        "-p", "torch_perf", "-p", "xdist", "-p", "torch_xdist", "-n", "2", "--torch-update-perf"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-update-perf cannot record under pytest-xdist (-n)*"])


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
