"""@pytest.mark.torch_max_flops in real runs: a budget for the FLOPs of a test body,
exact and load-free, on plain functions and unittest.TestCase methods alike."""

from __future__ import annotations

import re

import pytest

# the inner suites build modules, which draw from the global random generators;
# torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

SUITE = """
import unittest

import pytest
import torch

model = torch.nn.Linear(64, 64)

@pytest.mark.torch_max_flops(gflops=0.001)
def test_within():
    model(torch.ones(4, 64))

@pytest.mark.torch_max_flops(gflops=0.00001)
def test_over():
    model(torch.ones(4, 64))

@pytest.mark.torch_max_flops(0.00001)
def test_over_but_failing_itself():
    model(torch.ones(4, 64))
    assert False, "its own failure"

class TestCase(unittest.TestCase):
    @pytest.mark.torch_max_flops(gflops=0.00001)
    def test_method(self):
        model(torch.ones(4, 64))
"""
#: one Linear(64, 64) on 4 rows: 2 * 4 * 64 * 64
FLOPS = 2 * 4 * 64 * 64


def test_budgets_pass_and_fail_with_where_the_flops_went(pytester, run):
    pytester.makepyfile(test_suite=SUITE)
    result = run("-rA")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*FLOP budget exceeded in test_suite.py::test_over:",
            f"*FLOPs of the test body: {FLOPS:,} FLOPs, over the budget of 1e-05 GFLOPs*",
            "*aten.addmm*",
            "*raise the budget to at least @pytest.mark.torch_max_flops(gflops=*",
        ]
    )
    assert "FLOP budget exceeded in test_suite.py::TestCase::test_method" in result.stdout.str()
    assert "its own failure" in result.stdout.str()  # the body's failure stands
    assert "FLOP budget exceeded in test_suite.py::test_over_but" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"test_suite.py::test_within * budget * total * {FLOPS:,} FLOPs * 1,000,000 FLOPs"
            " * within budget*",
            "test_suite.py::test_over_but_failing_itself * budget * test failed*",
        ]
    )


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("torch_max_flops(gflops=-1)", "needs a positive, finite budget in billions*got -1"),
        ("torch_max_flops(gflops=float('nan'))", "needs a positive, finite budget*got nan"),
        ("torch_max_flops(flops=1)", "got unknown keyword(s) flops; it takes gflops=*"),
    ],
)
def test_a_malformed_marker_is_a_collection_error_naming_the_test(pytester, run, marker, expected):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_x():
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*test_a_malformed_marker*.py::test_x: @pytest.mark.*{expected}*"]
    )


def test_a_body_with_uncounted_work_is_named_at_the_end_of_the_run(pytester, run):
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.torch_max_flops(gflops=1)
        def test_encoder():
            layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
            with torch.inference_mode():
                layer(torch.ones(2, 5, 16))
        """
    )
    result = run("-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_encoder * budget * within budget (1 op(s) not counted)*",
            "torch: @pytest.mark.torch_max_flops checked none of the tests that ran (1 test body):",
            "  1 test: ops without a FLOP formula ran (aten._transformer_encoder_layer_fwd)*train*",
        ]
    )


def test_a_budget_counts_one_call_of_what_the_measuring_fixtures_measure(
    pytester, run, quiet_machine
):
    """latency(model, x) and perf_baseline(model, x) in a budgeted body: the body asked
    for the model's work once, so one call counts (not 0, not the harness's repeats,
    whose number depends on the machine)."""
    pytester.makepyfile(
        test_suite=f"""
import pytest, torch

model = torch.nn.Linear(64, 64)

@pytest.mark.torch_max_flops(gflops={FLOPS / 1e9!r})
def test_exact():
    model(torch.ones(4, 64))

@pytest.mark.torch_max_flops(gflops={FLOPS / 1e9!r})
def test_with_latency(latency):
    latency(model, torch.ones(4, 64))

@pytest.mark.torch_max_flops(gflops={FLOPS / 1e9!r})
def test_with_baseline(perf_baseline):
    perf_baseline(model, torch.ones(4, 64))

@pytest.mark.torch_max_flops(gflops={(FLOPS - 1) / 1e9!r})
def test_latency_over(latency):
    latency(lambda x: model(x), torch.ones(4, 64))

@pytest.mark.torch_max_flops(gflops={(FLOPS - 1) / 1e9!r})
def test_baseline_over(perf_baseline):
    perf_baseline(model, torch.ones(4, 64))
"""
    )
    result = run(
        "--torch-perf-max-time=0.05", "--torch-update-perf", "-rA", "--junitxml=report.xml"
    )
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([f"test_suite.py::test_with_latency * {FLOPS:,} FLOPs *"])
    # a budget and a baseline in one test: two rows, each with its own figures
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_with_baseline * baseline * min * recorded*",
            f"test_suite.py::test_with_baseline::flop-budget * budget * {FLOPS:,} FLOPs *",
        ]
    )
    junit = (pytester.path / "report.xml").read_text()
    names = re.findall(
        r'<property name="(torch_perf\.test_suite\.py::test_with_baseline[^"]*)"', junit
    )
    assert len(names) == len(set(names)), names
    assert "torch_perf.test_suite.py::test_with_baseline::flop-budget.flops" in names
    for name in ("test_latency_over", "test_baseline_over"):
        result.stdout.fnmatch_lines(
            [
                f"*FLOP budget exceeded in test_suite.py::{name}:",
                f"*FLOPs of the test body: {FLOPS:,}*",
            ]
        )
