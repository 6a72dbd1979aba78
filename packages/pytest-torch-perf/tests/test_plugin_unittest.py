"""perf's markers on unittest.TestCase methods: a latency budget cannot reach one (it
needs the latency fixture) and the end of the run says so; a benchmark suite cannot be
one and its set-up says so. (The compile budget watches them: test_plugin_compile.)"""

from __future__ import annotations

import pytest


def test_a_latency_budget_on_a_unittest_method_is_named_as_not_checked(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        import pytest

        @pytest.mark.torch_max_latency(ms=10_000)
        def test_timed(latency):
            latency(lambda: None)

        class TestServing(unittest.TestCase):
            @pytest.mark.torch_max_latency(ms=0.000001)
            def test_fast_enough(self):
                sum(range(1000))
        """
    )
    result = run("--torch-perf-max-time=0.02")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*- torch: what the checks reached -*",
            "torch: @pytest.mark.torch_max_latency checked 1 of the 2 test bodies that ran;"
            " not checked:",
            "  1 test: a unittest.TestCase method cannot request the latency fixture that"
            " times code under the budget; time the step in a plain test function:*"
            "(test_a_latency_budget_on_a_unittest_method_is_named_as_not_checked.py"
            "::TestServing::test_fast_enough)",
        ]
    )


def test_a_benchmark_suite_on_a_unittest_method_says_what_to_do(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        import torch
        from pytest_torch.perf import benchmark_suite

        class TestBench(unittest.TestCase):
            @benchmark_suite(batch_sizes=[1])
            def test_linear(self, batch_size=1):
                return torch.nn.Linear(2, 2), torch.ones(batch_size, 2)
        """
    )
    result = run("--torch-benchmark")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*::TestBench::test_linear: @benchmark_suite works on plain test functions, which"
            " pytest parametrizes into one case per batch size, dtype and mode; a"
            " unittest.TestCase method cannot be.*"
        ]
    )


def test_a_suite_without_perf_tests_gets_no_perf_line(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    result = run()
    result.assert_outcomes(passed=1)
    assert "torch perf" not in result.stdout.str()
    # a chosen thread count is worth a line in the header
    run("--torch-perf-threads=2").stdout.fnmatch_lines(
        ["torch perf: measurements on 2 intra-op threads (--torch-perf-threads)"]
    )


@pytest.mark.usefixtures("torch_seed")  # the recorded model draws its weights
def test_a_recording_run_that_recorded_nothing_says_so(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        class TestServing(unittest.TestCase):
            def test_step(self):
                sum(range(10))
        """
    )
    result = run("--torch-update-perf")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*- torch: what the checks reached -*",
            "torch: --torch-update-perf recorded no baseline: no test that ran called"
            " perf_baseline(...) (a fixture: a unittest.TestCase method cannot request it)*",
        ]
    )
    pytester.makepyfile(
        "import torch\n\ndef test_speed(perf_baseline):\n"
        "    perf_baseline(torch.nn.Linear(2, 2), torch.ones(1, 2))\n"
    )
    recorded = run("--torch-update-perf", "--torch-perf-max-time=0.02")
    assert "recorded no baseline" not in recorded.stdout.str()
