"""--torch-perf-measure=flops in real runs: perf_baseline and benchmark suites record and
compare FLOP counts (exact: a regression fails the first time, on any load), say which
work they could not count, and latency budgets stay on the wall clock."""

from __future__ import annotations

import json

import pytest

# the inner suites build modules, which draw from the global random generators;
# torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

SUITE = """
import os
import torch

WIDTH = int(os.environ.get("SUITE_WIDTH", "32"))
model = torch.nn.Sequential(torch.nn.Linear(16, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 4))

def test_mlp(perf_baseline):
    perf_baseline(model, torch.ones(8, 16))

def test_encoder(perf_baseline):
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    twice = os.environ.get("SUITE_TWICE") == "1"
    perf_baseline(torch.nn.Sequential(layer, layer) if twice else layer, torch.ones(2, 5, 16))
"""
FLOPS = "--torch-perf-measure=flops"
#: 2 * batch * (16 * width + width * 4) multiply-adds of the two Linear layers
MLP_32 = 2 * 8 * (16 * 32 + 32 * 4)
MLP_48 = 2 * 8 * (16 * 48 + 48 * 4)


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("SUITE_WIDTH", "32")
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _document(pytester) -> dict:
    return json.loads((pytester.path / ".torch-perf-baselines.json").read_text())


def test_record_then_compare_exact_counts(suite, run):
    result = run(FLOPS, "--torch-update-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "torch perf: counting FLOPs with torch's FlopCounterMode (torch *)*",
            f"test_suite.py::test_mlp * flops * exact * {MLP_32:,} FLOPs * recorded*",
            "recorded 2 FLOP count(s) for torch=* device=cpu in *.torch-perf-baselines.json",
        ]
    )
    (key,) = _document(suite)["flops"]
    assert key.startswith("torch=") and "+" not in key and key.endswith("device=cpu")
    entry = _document(suite)["flops"][key]["test_suite.py::test_mlp"]
    assert entry["total"] == MLP_32 and entry["by_op"] == {"aten.addmm": MLP_32}
    assert _document(suite)["machines"] == {}  # the wall clock's section stays as it was

    result = run(FLOPS, "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"test_suite.py::test_mlp * {MLP_32:,} FLOPs * +0.00 % * ok*"])


def test_a_regression_fails_the_first_time_and_names_where_the_flops_went(suite, run, monkeypatch):
    run(FLOPS, "--torch-update-perf").assert_outcomes(passed=2)
    monkeypatch.setenv("SUITE_WIDTH", "48")  # the hidden layer grows by half
    result = run(FLOPS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FLOP count regression in test_suite.py::test_mlp:",
            f"*FLOPs per call: {MLP_48:,} FLOPs vs baseline {MLP_32:,} FLOPs = 1.5000x*",
            "*grew most*",
            "*Sequential.0*",
            "*aten.addmm*",
            "*re-record with: pytest --torch-update-perf --torch-perf-measure=flops*test_mlp*",
        ]
    )


def test_work_without_a_flop_formula_is_named_never_silently_left_out(suite, run):
    run(FLOPS, "--torch-update-perf", "-k", "encoder").assert_outcomes(passed=1)
    result = run(FLOPS, "-k", "encoder", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_encoder * flops * ok (1 op(s) not counted)*",
            "torch: --torch-perf-measure=flops checked none of the tests that ran (1 test body):",
            "  1 test: ops without a FLOP formula ran (aten._transformer_encoder_layer_fwd)*",
        ]
    )


def test_more_uncounted_work_is_not_judged_never_called_ok(suite, run, monkeypatch):
    run(FLOPS, "--torch-update-perf", "-k", "encoder").assert_outcomes(passed=1)
    monkeypatch.setenv("SUITE_TWICE", "1")  # the layer runs twice: its FLOPs stay 0
    result = run(FLOPS, "-k", "encoder", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_encoder * not judged: uncounted work changed*",
            "*: not judged: 0 FLOPs per call is within the limit of baseline 0 FLOPs, but the"
            " work it cannot count changed:",
            "*aten._transformer_encoder_layer_fwd 1 -> 2 calls*",
        ]
    )
    run(FLOPS, "-k", "encoder", "--torch-perf-strict").assert_outcomes(failed=1)


def test_after_a_torch_upgrade_counts_compare_with_the_last_release_saying_so(suite, run):
    """A count recorded under another torch release (same device type) is compared:
    the same count passes, its row naming the release; a grown one fails, its message
    saying torch itself may have changed it. Another device type's count is not used."""
    run(FLOPS, "--torch-update-perf", "-k", "mlp").assert_outcomes(passed=1)
    document = _document(suite)
    (key,) = document["flops"]
    entry = document["flops"][key]
    document["flops"] = {"torch=1.0.0 device=cpu": entry, "torch=0.9.0 device=cpu": entry}
    (suite.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    result = run(FLOPS, "-k", "mlp", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_mlp * flops * ok (baseline from torch=1.0.0)*"])
    (test,) = entry
    entry[test]["total"] -= 1  # this run now counts one FLOP more than the baseline
    (suite.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    result = run(FLOPS, "-k", "mlp")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the baseline was recorded under torch=1.0.0, this run is torch=*: FLOP formulas"
            " and the ops torch dispatches to change between releases, so the change may be"
            " torch's. If it is, re-record under this release with: *--torch-update-perf*",
        ]
    )
    document["flops"] = {"torch=1.0.0 device=cuda": entry}
    (suite.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    result = run(FLOPS, "-k", "mlp", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*not comparable: its FLOP count was recorded as *torch=1.0.0*"])
    run(FLOPS, "-k", "mlp", "--torch-perf-strict").assert_outcomes(failed=1)


def test_perf_baseline_rejects_a_negative_flop_tolerance(pytester, run):
    pytester.makepyfile(
        """
        import torch

        def test_x(perf_baseline):
            perf_baseline(torch.nn.Linear(2, 2), torch.ones(1, 2), flop_tolerance=-1)

        def test_y(perf_baseline):
            perf_baseline(torch.nn.Linear(2, 2), torch.ones(1, 2), tolerance=0.1)
        """
    )
    result = run(FLOPS)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*flop_tolerance must be a finite number >= 0, got -1*",
            "*perf_baseline got unexpected keyword(s) tolerance; it takes name= and*",
        ]
    )


def test_latency_budgets_stay_judged_on_the_wall_clock(pytester, run, quiet_machine):
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.torch_max_latency(ms=60_000)
        def test_fast(latency):
            latency(torch.nn.Linear(2, 2), torch.ones(1, 2))
        """
    )
    result = run(FLOPS, "--torch-perf-max-time=0.05", "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_fast * budget * median * within budget*"])


def test_an_unknown_engine_names_every_one(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    result = run("--torch-perf-measure=cycles")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--torch-perf-measure: expected one of wall, instructions, flops, got 'cycles'*"]
    )


@pytest.mark.accelerator
def test_accelerator_counts_are_filed_under_the_device_and_budgets_count_its_work(
    pytester, run, accelerator
):
    pytester.makepyfile(
        test_suite=f"""
        import pytest, torch

        def test_mlp(perf_baseline):
            model = torch.nn.Linear(64, 64).to("{accelerator}")
            perf_baseline(model, torch.ones(4, 64, device="{accelerator}"))

        @pytest.mark.torch_max_flops(gflops=0.00001)
        def test_over():
            torch.nn.Linear(64, 64).to("{accelerator}")(torch.ones(4, 64, device="{accelerator}"))
        """
    )
    run(FLOPS, "--torch-update-perf", "-k", "mlp").assert_outcomes(passed=1)
    (key,) = _document(pytester)["flops"]
    assert key.endswith(f"device={accelerator}")
    assert _document(pytester)["flops"][key]["test_suite.py::test_mlp"]["total"] == 2 * 4 * 64 * 64
    result = run(FLOPS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*FLOPs of the test body: {2 * 4 * 64 * 64:,} FLOPs*"])
