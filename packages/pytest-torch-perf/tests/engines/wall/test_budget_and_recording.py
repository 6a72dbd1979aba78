"""Unit tests of latency budgets and of recording baselines (the wall-clock engine), with
made-up measurements."""

from __future__ import annotations

import pytest

from pytest_torch.perf import outcome as outcomes
from pytest_torch.perf.checks import latency_budget
from pytest_torch.perf.engines.wall import budget as budgets
from pytest_torch.perf.engines.wall import recording
from pytest_torch.perf.engines.wall.contention import Interference
from pytest_torch.perf.engines.wall.entry import Baseline
from pytest_torch.perf.engines.wall.timing import LatencyResult

QUIET = Interference("run-queue wait", 0.0, 0, 40, others_cores=0.1, cores=2)
#: a busy machine: this process waited 60 % of the time, 9 samples were undisturbed
BUSY = Interference("run-queue wait", 0.6, 31, 40, others_cores=1.9, cores=2)


def result(
    ms: float, threads: int = 2, found: Interference | None = QUIET, generous: float = 1.0
) -> LatencyResult:
    """A measurement whose min and median are both ``ms``; its generous figures are
    ``generous`` times its samples."""
    samples = (ms, ms, ms * 1.02)
    return LatencyResult(
        samples,
        5.0,
        3,
        1,
        "cpu",
        threads,
        "spread",
        (),
        found,
        tuple(generous * t for t in samples),
    )


def busy(ms: float) -> LatencyResult:
    """Measured while the process waited 60 % of the time: the code can have run 0.4x."""
    return result(ms, found=BUSY, generous=0.4)


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((50,), {}, budgets.Budget(50.0, "median")),
        ((), {"ms": 2.5, "stat": "p90"}, budgets.Budget(2.5, "p90")),
        ((10, "min"), {}, budgets.Budget(10.0, "min")),
    ],
)
def test_parse_budget(args, kwargs, expected):
    assert latency_budget.parse_budget(args, kwargs, "t::x") == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs a positive, finite budget in milliseconds, got None"),
        ((-1,), {}, "needs a positive, finite budget in milliseconds, got -1"),
        (("50",), {}, "got '50'"),
        ((True,), {}, "got True"),
        ((float("inf"),), {}, "needs a positive, finite budget in milliseconds, got inf"),
        ((), {"ms": float("nan")}, "got nan"),
        ((5,), {"stat": "p95"}, "stat must be one of median, mean, min, p90, p99, got 'p95'"),
        ((5,), {"budget": 3}, "unknown keyword(s) budget"),
        ((5,), {"ms": 3}, "takes ms and stat once"),
    ],
)
def test_parse_budget_rejects_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        latency_budget.parse_budget(args, kwargs, "t.py::test_x")
    assert str(info.value).startswith("t.py::test_x: @pytest.mark.torch_max_latency")
    assert message in str(info.value)


def test_budget_failure_message():
    assert budgets.budget_failure(result(10.0), budgets.Budget(20.0)) is None
    message = budgets.budget_failure(result(30.0), budgets.Budget(20.0))
    assert message.startswith("latency budget exceeded: median 30 ms > budget 20 ms (+50.0 %)")
    assert "p90" in message and "3 samples" in message and "cpu, 2 threads" in message
    assert "machine: not busy (this process waited for a CPU 0 % of the time" in message
    assert "busy" not in budgets.budget_failure(result(30.0, found=None), budgets.Budget(20.0))
    assert "what to try" in message
    record = budgets.budget_record("t::x", result(30.0), budgets.Budget(20.0), "OVER BUDGET")
    assert record.verdict == "OVER BUDGET"
    assert record.change_pct is None, "a budget is a ceiling: no change against it"
    assert record.measured == 30.0 and record.reference == 20.0


def budget(*measurements, strict=False, ms=20.0):
    pending = list(measurements)
    outcome = budgets.check_budget("t::x", lambda: pending.pop(0), budgets.Budget(ms), strict)
    return outcome, len(measurements) - len(pending)


def test_a_budget_is_confirmed_before_it_fails_and_noise_passes():
    outcome, calls = budget(result(10.0))
    assert (outcome.status, calls, outcome.record.verdict) == ("pass", 1, "within budget")
    outcome, calls = budget(result(30.0), result(31.0))
    assert (outcome.status, calls, outcome.record.verdict) == ("fail", 2, "OVER BUDGET")
    assert outcome.message.startswith("latency budget exceeded: median 31 ms > budget 20 ms")
    assert type(outcome.error()) is outcomes.PerfRegressionError
    assert "note: confirmed by a second measurement (first: 30 ms)" in outcome.message
    outcome, calls = budget(result(30.0), result(19.0))
    assert (outcome.status, calls) == ("pass", 2)
    assert (
        "over the limit at first (30 ms), then within it (19 ms): treated as noise"
        in (outcome.notes[0])
    )


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_a_budget_over_on_a_busy_machine_by_what_waiting_explains_is_not_judged(strict, status):
    outcome, calls = budget(busy(30.0), busy(32.0), strict=strict)
    assert (outcome.status, calls) == (status, 2)
    assert outcome.record.verdict == "not judged: machine busy"
    message = outcome.message
    assert message.startswith(
        "t::x: not judged: machine busy. The median latency 32 ms is over the budget of 20 ms,"
        " but other processes slowed the measurement down: this process waited for a CPU 60 %"
        " of the time (run-queue wait); 9 of 40 samples undisturbed; other processes kept 1.9"
        " of 2 cores busy; after taking out the 60 % of the time this process waited, the"
        " code can have run at best at median 12.8 ms: within the limit of 20 ms, so the"
        " excess may not be the code's."
    )
    assert "measured 2 times: 30 ms (machine busy), 32 ms (machine busy)" in message
    assert ("--torch-perf-strict fails it" in message) is not strict
    assert type(outcome.error()) is outcomes.PerfNotJudgedError  # never called a regression


def test_a_budget_exceeded_by_more_than_any_interference_explains_fails_on_a_busy_machine():
    outcome, calls = budget(busy(60_000.0), busy(61_000.0))
    assert (outcome.status, calls) == ("fail", 2)
    assert outcome.record.verdict == "OVER BUDGET (machine busy)"
    assert type(outcome.error()) is outcomes.PerfRegressionError
    assert outcome.message.startswith("latency budget exceeded: median 61 s > budget 20 ms")
    assert (
        "machine: busy (this process waited for a CPU 60 % of the time (run-queue wait); 9 of 40"
        " samples undisturbed; other processes kept 1.9 of 2 cores busy); over the limit even"
        " so: after taking out the 60 % of the time this process waited, the code can have run"
        " at best at median 24.4 s: still 1220.0x the limit of 20 ms" in outcome.message
    )
    assert "confirmed by a second measurement (first: 60 s (machine busy))" in outcome.message


def test_a_busy_measurement_within_the_budget_passes_and_says_so():
    outcome, _ = budget(busy(10.0))
    assert (outcome.status, outcome.record.verdict) == ("pass", "within budget (machine busy)")
    assert "within the limit even so" in outcome.notes[0]


def test_one_quiet_measurement_over_the_budget_is_not_enough_to_fail():
    outcome, calls = budget(result(30.0), busy(31.0), busy(32.0))
    assert (outcome.status, calls) == ("skip", 3)
    outcome, calls = budget(busy(30.0), result(31.0), result(32.0))
    assert (outcome.status, calls) == ("fail", 3)
    assert (
        "confirmed by a second measurement (first: 31 ms); disturbed and not counted: 30 ms"
        in outcome.message
    )


def test_recording_flags_noisy_measurements():
    noisy = LatencyResult((1.0, 2.0, 3.0, 4.0), 5.0, 3, 1, "cpu", 2, "time cap")
    recorded = recording.new_baseline(noisy, {}, "2.13.0")
    outcome = recording.record_outcome("t::x", recorded, {}, noisy)
    assert outcome.record.verdict.startswith("recorded (noisy")
    assert "re-record on a quieter machine" in outcome.message
    assert (recorded.threads, recorded.stat, recorded.latency_ms) == (2, "min", 1.0)
    assert recorded.recorded.endswith("+00:00")
    assert recorded.core_probe_us is None  # no monitor, no core probe
    found = Interference("run-queue wait", 0.0, 0, 4, core_probe_s=9.6e-6)
    watched = LatencyResult((1.0, 2.0), 5.0, 3, 1, "cpu", 2, "spread", (), found)
    assert recording.new_baseline(watched, {}, "2.13.0").core_probe_us == pytest.approx(9.6)


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
        "vs",
        "reference",
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


def test_budget_rows_show_the_share_of_the_budget_not_a_change():
    """53 µs under a 50 ms budget is "0.1 % of budget", never "-99.9 %"."""
    from pytest_torch.perf.records import PerfRecord, render_table

    under = budgets.budget_record("t::fast", result(0.0532), budgets.Budget(50.0), "within budget")
    over = budgets.budget_record("t::slow", result(30.0), budgets.Budget(20.0), "OVER BUDGET")
    rows = render_table([under, over])[2:]
    assert "0.1 % of budget" in rows[0] and "-99" not in rows[0]
    assert "150 % of budget" in rows[1]
    properties = dict(under.to_properties())
    assert "torch_perf.t::fast.change_pct" not in properties
    (decoded,) = PerfRecord.from_properties(under.to_properties())
    assert decoded.check == "budget" and decoded.change_pct is None


def record(*measurements, strict=False):
    pending = list(measurements)
    outcome = recording.record("t::x", lambda: pending.pop(0), "2.13.0", strict)
    return outcome, len(measurements) - len(pending)


def test_recording_keeps_the_fastest_of_several_measurements():
    outcome, calls = record(
        (result(1.3), {"cuda:0": 5}), (result(1.0), {"cuda:0": 7}), (result(1.2), {"cuda:0": 6})
    )
    assert calls == 3
    assert outcome.baseline.latency_ms == pytest.approx(1.0)
    assert outcome.baseline.peak_memory == {"cuda:0": 7}
    assert outcome.measured.min == pytest.approx(1.0)


def test_recording_takes_only_undisturbed_measurements():
    outcome, calls = record(
        (busy(0.5), {}), (result(1.3), {}), (busy(0.4), {}), (result(1.1), {}), (result(1.2), {})
    )
    assert calls == 5
    assert outcome.status == "pass"
    assert outcome.baseline.latency_ms == pytest.approx(1.1)  # not the busy 0.4 ms


def test_a_busy_machines_undisturbed_samples_are_recorded_and_say_so():
    found = Interference("run-queue wait", 0.3, 50, 100, undisturbed_s=1.0, cores=2)
    outcome, calls = record(*[(result(1.0, found=found), {})] * 3)
    assert (outcome.status, calls) == ("pass", 3)
    assert outcome.record.verdict == "recorded (busy machine: from 50 of 100 samples, undisturbed)"
    assert "on a busy machine, from the 50 of 100 samples that nothing disturbed" in outcome.message
    assert (outcome.baseline.samples, outcome.baseline.undisturbed_samples) == (100, 50)
    data = outcome.baseline.to_json()
    assert (data["samples"], data["undisturbed_samples"]) == (100, 50)
    again = Baseline.from_json(data, "here")
    assert (again.samples, again.undisturbed_samples) == (100, 50)
    quiet, _ = record(*[(result(1.0), {})] * 3)
    assert quiet.record.verdict == "recorded"
    assert "samples" not in quiet.baseline.to_json()


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_nothing_is_recorded_on_a_machine_busy_throughout(strict, status):
    outcome, calls = record(*[(busy(1.0), {})] * 6, strict=strict)
    assert (outcome.status, calls, outcome.baseline) == (status, 3, None)  # gives up after 3
    assert outcome.record.verdict == "not recorded: machine busy"
    assert outcome.message.startswith(
        "t::x: not recorded: machine busy. A baseline is recorded from undisturbed samples (at"
        " least 5, adding up to 20 ms), but other processes disturbed all 3 measurements too"
        " much: this process waited for a CPU 60 %"
    )
