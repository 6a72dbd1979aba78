"""Unit tests of budget and baseline judging, with made-up measurements."""

from __future__ import annotations

import pytest

from pytest_torch.perf import checks
from pytest_torch.perf.baselines import Baseline
from pytest_torch.perf.timing import LatencyResult


def result(median_ms: float, threads: int = 2) -> LatencyResult:
    return LatencyResult(
        (median_ms * 0.99, median_ms, median_ms * 1.01), 5.0, 3, 1, "cpu", threads, "spread"
    )


def baseline(latency_ms=1.0, threads=2, torch="2.13.0", peak=None) -> Baseline:
    return Baseline(
        latency_ms,
        "median",
        0.01,
        "cpu",
        threads,
        torch,
        "3.11.7",
        "2026-11-01T00:00:00+00:00",
        peak or {},
    )


def compare(base, *measurements, strict=False, tolerance=0.3, slack=0.1, torch_version="2.13.0"):
    pending = list(measurements)
    calls = []

    def measure():
        calls.append(1)
        return pending.pop(0)

    outcome = checks.compare(
        "t.py::test_x",
        base,
        measure,
        threads=2,
        torch_version=torch_version,
        tolerance=tolerance,
        memory_tolerance=0.1,
        slack_ms=slack,
        strict=strict,
        machine="cpu: Example CPU x 2",
        rerecord="pytest --torch-update-perf t.py::test_x",
    )
    return outcome, len(calls)


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((50,), {}, checks.Budget(50.0, "median")),
        ((), {"ms": 2.5, "stat": "p90"}, checks.Budget(2.5, "p90")),
        ((10, "min"), {}, checks.Budget(10.0, "min")),
    ],
)
def test_parse_budget(args, kwargs, expected):
    assert checks.parse_budget(args, kwargs, "t::x") == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs a positive budget in milliseconds, got None"),
        ((-1,), {}, "needs a positive budget in milliseconds, got -1"),
        (("50",), {}, "got '50'"),
        ((True,), {}, "got True"),
        ((5,), {"stat": "p95"}, "stat must be one of median, mean, min, p90, p99, got 'p95'"),
        ((5,), {"budget": 3}, "unknown keyword(s) budget"),
        ((5,), {"ms": 3}, "takes ms and stat once"),
    ],
)
def test_parse_budget_rejects_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        checks.parse_budget(args, kwargs, "t.py::test_x")
    assert str(info.value).startswith("t.py::test_x: @pytest.mark.torch_max_latency")
    assert message in str(info.value)


def test_budget_failure_message():
    assert checks.budget_failure(result(10.0), checks.Budget(20.0)) is None
    message = checks.budget_failure(result(30.0), checks.Budget(20.0))
    assert message.startswith("latency budget exceeded: median 30 ms > budget 20 ms (+50.0 %)")
    assert "p90" in message and "3 samples" in message and "cpu, 2 threads" in message
    assert "what to try" in message
    record = checks.budget_record("t::x", result(30.0), checks.Budget(20.0))
    assert record.verdict == "OVER BUDGET"
    assert record.change_pct == pytest.approx(50.0)


def test_within_tolerance_passes_with_one_measurement():
    outcome, calls = compare(baseline(1.0), (result(1.2), {}))
    assert (outcome.status, calls) == ("pass", 1)
    assert outcome.record.verdict == "ok"
    assert outcome.record.change_pct == pytest.approx(20.0)


def test_a_regression_is_confirmed_before_failing():
    outcome, calls = compare(baseline(1.0), (result(2.0), {}), (result(2.1), {}))
    assert (outcome.status, calls) == ("fail", 2)
    message = outcome.message
    for part in (
        "performance regression in t.py::test_x",
        "latency (median): 2.1 ms vs baseline 1 ms = 2.10x (+110.0 %)",
        "limit 1.4 ms = baseline x (1 + tolerance 0.3) + slack 0.1 ms",
        "cpu: Example CPU x 2",
        "confirmed by a second measurement (first: 2 ms)",
        "re-record with: pytest --torch-update-perf t.py::test_x",
    ):
        assert part in message, part


def test_noise_that_does_not_repeat_is_not_a_failure():
    outcome, calls = compare(baseline(1.0), (result(2.0), {}), (result(1.1), {}))
    assert (outcome.status, calls) == ("pass", 2)
    assert "treated as noise" in outcome.notes[0]


def test_faster_passes_and_suggests_re_recording():
    outcome, _ = compare(baseline(1.0), (result(0.5), {}))
    assert outcome.status == "pass"
    assert outcome.record.verdict == "improved 50 %"
    assert "consider re-recording" in outcome.message


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_other_thread_count_is_not_judged(strict, status):
    outcome, calls = compare(baseline(1.0, threads=8), strict=strict)
    assert (outcome.status, calls) == (status, 0)
    assert "recorded with 8 thread(s), this run uses 2" in outcome.message
    assert "torch.set_num_threads(8)" in outcome.message
    assert (outcome.record.verdict, outcome.record.measured_ms) == ("not comparable", None)
    assert outcome.record.reference_ms == 1.0


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_missing_baseline(strict, status):
    outcome = checks.missing_outcome("t.py::test_x", "cpu: Example CPU x 2", strict)
    assert outcome.status == status
    assert (
        "no perf baseline for t.py::test_x on this machine (cpu: Example CPU x 2)"
        in outcome.message
    )
    assert "pytest --torch-update-perf" in outcome.message


def test_peak_memory_regression():
    base = baseline(1.0, peak={"cuda:0": 100 * 2**20})
    outcome, _ = compare(base, (result(1.0), {"cuda:0": 130 * 2**20}))
    assert outcome.status == "fail"
    assert outcome.record.verdict == "MEMORY REGRESSION"
    assert "peak memory on cuda:0: 130.0 MiB vs baseline 100.0 MiB (+30.0 %" in outcome.message
    outcome, _ = compare(base, (result(1.0), {"cuda:0": 110 * 2**20}))
    assert outcome.status == "pass"


def test_torch_version_change_is_compared_and_mentioned():
    outcome, _ = compare(baseline(1.0, torch="2.9.0"), (result(3.0), {}), (result(3.0), {}))
    assert outcome.status == "fail"
    assert "baseline from torch 2.9.0, now 2.13.0" in outcome.message


def test_recording_flags_noisy_measurements():
    noisy = LatencyResult((1.0, 2.0, 3.0, 4.0), 5.0, 3, 1, "cpu", 2, "time cap")
    recorded = checks.new_baseline(noisy, {}, "2.13.0")
    outcome = checks.record_outcome("t::x", recorded, {})
    assert outcome.record.verdict.startswith("recorded (noisy")
    assert "re-record on a quieter machine" in outcome.message
    assert recorded.threads == 2
    assert recorded.recorded.endswith("+00:00")


def test_records_survive_the_trip_through_report_properties():
    from pytest_torch.perf.records import PerfRecord, render_table

    record = PerfRecord("t.py::x[a.b]::n", "baseline", "median", 1.5, "ok", 1.0, 50.0, 2.0)
    properties = [("unrelated", 1), *record.to_properties(), ("torch_perf.junk.x", "y")]
    assert PerfRecord.from_properties(properties) == [record]
    strings = [(name, str(value)) for name, value in record.to_properties()]
    assert PerfRecord.from_properties(strings) == [record]  # e.g. after a round trip as text
    table = render_table([record, PerfRecord("t.py::y", "baseline", "median", None, "no baseline")])
    assert table[0].split() == [
        "test",
        "check",
        "statistic",
        "measured",
        "reference",
        "change",
        "verdict",
    ]
    assert table[2].split() == [
        "t.py::x[a.b]::n",
        "baseline",
        "median",
        "1.5",
        "ms",
        "1",
        "ms",
        "+50.0",
        "%",
        "ok",
    ]
    assert table[3].split()[3:6] == ["-", "-", "-"]


def test_recording_keeps_the_fastest_of_several_measurements():
    pending = [
        (result(1.3), {"cuda:0": 5}),
        (result(1.0), {"cuda:0": 7}),
        (result(1.2), {"cuda:0": 6}),
    ]
    recorded, memory = checks.record(lambda: pending.pop(0), "2.13.0")
    assert not pending  # all three taken
    assert recorded.latency_ms == pytest.approx(1.0)
    assert memory == {"cuda:0": 7} == recorded.peak_memory
