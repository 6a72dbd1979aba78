"""Unit tests of budget and baseline judging, with made-up measurements."""

from __future__ import annotations

import pytest

from pytest_torch.perf import checks, comparison
from pytest_torch.perf.baselines import Baseline
from pytest_torch.perf.measure.contention import Interference
from pytest_torch.perf.measure.timing import LatencyResult

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


def slower_core(ms: float) -> LatencyResult:
    """Measured on a core whose core probe runs at best 18 µs (a baseline of
    ``baseline(core_us=10)`` was recorded where it ran at 10 µs: 1.8x faster)."""
    found = Interference("run-queue wait", 0.0, 0, 40, cores=2, core_probe_s=18e-6)
    return result(ms, found=found)


def baseline(
    latency_ms=1.0, threads=2, torch="2.13.0", peak=None, stat="min", core_us=None
) -> Baseline:
    return Baseline(
        latency_ms,
        stat,
        0.01,
        "cpu",
        threads,
        torch,
        "3.11.7",
        "2026-11-01T00:00:00+00:00",
        peak or {},
        core_probe_us=core_us,
    )


def compare(
    base,
    *measurements,
    strict=False,
    tolerance=0.3,
    slack=0.1,
    torch_version="2.13.0",
    elsewhere=None,
):
    pending = list(measurements)
    calls = []

    def measure():
        calls.append(1)
        return pending.pop(0)

    outcome = comparison.compare(
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
        elsewhere=elsewhere,
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
        checks.parse_budget(args, kwargs, "t.py::test_x")
    assert str(info.value).startswith("t.py::test_x: @pytest.mark.torch_max_latency")
    assert message in str(info.value)


def test_budget_failure_message():
    assert checks.budget_failure(result(10.0), checks.Budget(20.0)) is None
    message = checks.budget_failure(result(30.0), checks.Budget(20.0))
    assert message.startswith("latency budget exceeded: median 30 ms > budget 20 ms (+50.0 %)")
    assert "p90" in message and "3 samples" in message and "cpu, 2 threads" in message
    assert "machine: not busy (this process waited for a CPU 0 % of the time" in message
    assert "busy" not in checks.budget_failure(result(30.0, found=None), checks.Budget(20.0))
    assert "what to try" in message
    record = checks.budget_record("t::x", result(30.0), checks.Budget(20.0), "OVER BUDGET")
    assert record.verdict == "OVER BUDGET"
    assert record.change_pct is None, "a budget is a ceiling: no change against it"
    assert record.measured_ms == 30.0 and record.reference_ms == 20.0


def budget(*measurements, strict=False, ms=20.0):
    pending = list(measurements)
    outcome = checks.check_budget("t::x", lambda: pending.pop(0), checks.Budget(ms), strict)
    return outcome, len(measurements) - len(pending)


def test_a_budget_is_confirmed_before_it_fails_and_noise_passes():
    outcome, calls = budget(result(10.0))
    assert (outcome.status, calls, outcome.record.verdict) == ("pass", 1, "within budget")
    outcome, calls = budget(result(30.0), result(31.0))
    assert (outcome.status, calls, outcome.record.verdict) == ("fail", 2, "OVER BUDGET")
    assert outcome.message.startswith("latency budget exceeded: median 31 ms > budget 20 ms")
    assert type(outcome.error()) is checks.PerfRegressionError
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
    assert type(outcome.error()) is checks.PerfNotJudgedError  # never called a regression


def test_a_budget_exceeded_by_more_than_any_interference_explains_fails_on_a_busy_machine():
    outcome, calls = budget(busy(60_000.0), busy(61_000.0))
    assert (outcome.status, calls) == ("fail", 2)
    assert outcome.record.verdict == "OVER BUDGET (machine busy)"
    assert type(outcome.error()) is checks.PerfRegressionError
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
        "latency (min): 2.1 ms vs baseline 1 ms = 2.10x (+110.0 %)",
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


def test_the_baselines_own_statistic_is_compared():
    # an older baseline recorded the median: this run's median is compared with it
    slow_median = LatencyResult((1.0, 2.0, 2.1), 5.0, 3, 1, "cpu", 2, "spread", (), QUIET)
    outcome, _ = compare(baseline(1.0, stat="median"), (slow_median, {}), (slow_median, {}))
    assert outcome.status == "fail"
    assert "latency (median): 2 ms vs baseline 1 ms" in outcome.message
    outcome, _ = compare(baseline(1.0), (slow_median, {}))  # min 1.0: fine
    assert outcome.status == "pass"


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_over_the_limit_on_a_busy_machine_by_what_waiting_explains_is_not_judged(strict, status):
    outcome, calls = compare(baseline(1.0), (busy(2.0), {}), (busy(2.2), {}), strict=strict)
    assert (outcome.status, calls) == (status, 2)
    assert outcome.record.verdict == "not judged: machine busy"
    assert outcome.record.measured_ms == pytest.approx(2.2)
    assert outcome.message.startswith(
        "t.py::test_x: not judged: machine busy. min 2.2 ms vs baseline 1 ms = 2.20x is over"
        " the limit 1.4 ms = baseline x (1 + tolerance 0.3) + slack 0.1 ms, but other"
        " processes slowed the measurement down: this process waited for a CPU 60 %"
    )
    assert (
        "after taking out the 60 % of the time this process waited, the code can have run at"
        " best at min 0.88 ms: within the limit of 1.4 ms, so the excess may not be the code's."
        in outcome.message
    )


def test_a_1000x_regression_fails_on_a_busy_machine_with_the_arithmetic():
    outcome, calls = compare(baseline(1.0), (busy(1000.0), {}), (busy(1010.0), {}))
    assert (outcome.status, calls) == ("fail", 2)
    assert outcome.record.verdict == "REGRESSION (machine busy)"
    assert type(outcome.error()) is checks.PerfRegressionError
    message = outcome.message
    assert "latency (min): 1.01 s vs baseline 1 ms = 1010.00x" in message
    assert (
        "machine: busy (this process waited for a CPU 60 % of the time (run-queue wait); 9 of"
        " 40 samples undisturbed; other processes kept 1.9 of 2 cores busy); over the limit"
        " even so: after taking out the 60 % of the time this process waited, the code can"
        " have run at best at min 404 ms: still 288.6x the limit of 1.4 ms" in message
    )


def test_a_small_excess_beside_the_same_busy_machine_is_not_judged():
    # 1.2x against a limit of 1.1x: the 60 % waited can explain it
    outcome, calls = compare(
        baseline(1.0), (busy(1.2), {}), (busy(1.2), {}), tolerance=0.1, slack=0.0
    )
    assert (outcome.status, calls, outcome.record.verdict) == (
        "skip",
        2,
        "not judged: machine busy",
    )


def test_a_busy_machine_never_hides_a_pass_nor_a_memory_regression():
    outcome, calls = compare(baseline(1.0), (busy(1.1), {}))
    assert (outcome.status, calls, outcome.record.verdict) == ("pass", 1, "ok (machine busy)")
    base = baseline(1.0, peak={"cpu": 100 * 2**20})
    outcome, _ = compare(base, (busy(2.0), {"cpu": 200 * 2**20}), (busy(2.0), {"cpu": 200 * 2**20}))
    assert (outcome.status, outcome.record.verdict) == ("fail", "MEMORY REGRESSION")


def test_a_core_slower_than_the_recording_ones_explains_only_its_own_share():
    # this core runs the reference loop 1.8x slower than the recording process did
    base = baseline(1.0, core_us=10.0)
    outcome, _ = compare(base, (slower_core(1.2), {}))
    assert (outcome.status, outcome.record.verdict) == ("pass", "ok")  # never called busy
    outcome, calls = compare(base, (slower_core(1.5), {}), (slower_core(1.5), {}))
    assert (outcome.status, calls, outcome.record.verdict) == ("skip", 2, "not judged: slower host")
    assert (
        "but this process's core ran a fixed hash 1.80x slower than the one that recorded"
        " the baseline (18 µs vs 10 µs at best); after taking out a core 1.80x slower than the"
        " one the baseline was recorded on, the code can have run at best at min 0.833 ms:"
        " within the limit of 1.4 ms" in outcome.message
    )
    assert "a slower host that shares the machine key" in outcome.message
    # twice the baseline and more is more than the core explains: a regression
    outcome, calls = compare(base, (slower_core(3.0), {}), (slower_core(3.0), {}))
    assert (outcome.status, calls) == ("fail", 2)
    assert outcome.record.verdict == "REGRESSION (slower host)"
    assert (
        "machine: slower than at recording (this process waited for a CPU 0 % of the time"
        in outcome.message
    )
    assert "the code can have run at best at min 1.67 ms: still 1.2x the limit" in outcome.message
    # a core as fast as the recording one's: compared at face value
    outcome, _ = compare(
        baseline(1.0, core_us=18.0), (slower_core(1.5), {}), (slower_core(1.5), {})
    )
    assert outcome.record.verdict == "REGRESSION"


def test_a_recorded_core_no_host_can_match_explains_at_most_a_plausible_slowdown():
    # a baseline whose reference loop was edited to 1 ns: at most 3x is taken out
    outcome, _ = compare(
        baseline(1.0, core_us=1e-3), (slower_core(1028.0), {}), (slower_core(1028.0), {})
    )
    assert (outcome.status, outcome.record.verdict) == ("fail", "REGRESSION (slower host)")
    assert "a core 3.00x slower than the one the baseline was recorded on" in outcome.message


def test_a_modest_regression_of_a_short_call_names_the_process_layout():
    note = "a short call can run slower in one process than in another by their address"
    outcome, _ = compare(baseline(0.02), (result(0.03), {}), (result(0.03), {}), slack=0.0)
    assert outcome.status == "fail" and note in outcome.message
    assert "If a re-run passes, that was it" in outcome.message
    for base, now in ((0.02, 0.06), (1.0, 1.5)):  # more than a layout does; a longer call
        outcome, _ = compare(baseline(base), (result(now), {}), (result(now), {}), slack=0.0)
        assert outcome.status == "fail" and note not in outcome.message


class Elsewhere:
    """A fresh process that measures ``answer`` (a LatencyResult, or why it could not)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def __call__(self):
        self.calls += 1
        return self.answer if isinstance(self.answer, str) else (self.answer, {})


def test_a_short_calls_modest_regression_within_the_limit_in_a_fresh_process_passes():
    # 1.5x in this process (its address layout), 1.05x in another: the code is that fast
    fresh = Elsewhere(result(0.021))
    outcome, calls = compare(
        baseline(0.02), (result(0.03), {}), (result(0.03), {}), slack=0.0, elsewhere=fresh
    )
    assert (outcome.status, calls, fresh.calls) == ("pass", 2, 1)
    assert outcome.record.verdict == "ok (in a fresh process)"
    assert outcome.record.measured_ms == 0.021
    assert outcome.record.change_pct == pytest.approx(5.0)
    assert (
        "over the limit in this process (min 30 µs = 1.50x) and within it in a fresh one"
        " (21 µs)" in outcome.message
    )


def test_a_short_calls_regression_measured_in_a_fresh_process_too_fails_confirmed():
    fresh = Elsewhere(result(0.029))
    outcome, _ = compare(
        baseline(0.02), (result(0.03), {}), (result(0.03), {}), slack=0.0, elsewhere=fresh
    )
    assert (outcome.status, outcome.record.verdict, fresh.calls) == ("fail", "REGRESSION", 1)
    assert (
        "confirmed in a fresh process (another address layout): min 29 µs = 1.45x"
        in outcome.message
    )
    assert "a short call can run slower" not in outcome.message  # two layouts agree


def test_a_fresh_process_that_cannot_tell_leaves_the_failure_with_the_reason():
    reason = "the fresh run took more than 120 s and was stopped"
    outcome, _ = compare(
        baseline(0.02),
        (result(0.03), {}),
        (result(0.03), {}),
        slack=0.0,
        elsewhere=Elsewhere(reason),
    )
    assert outcome.status == "fail"
    assert f"It could not be measured again in a fresh process: {reason}." in outcome.message
    # disturbed enough to explain its excess: it neither confirms nor clears
    fresh = Elsewhere(busy(0.04))
    outcome, _ = compare(
        baseline(0.02), (result(0.03), {}), (result(0.03), {}), slack=0.0, elsewhere=fresh
    )
    assert outcome.status == "fail" and "confirmed in a fresh process" not in outcome.message
    assert (
        "It could not be measured again in a fresh process: it measured min 40 µs, but other"
        " processes disturbed it enough to explain that (this process waited" in outcome.message
    )
    # disturbed, but over the limit even after taking out every wait: it confirms
    outcome, _ = compare(
        baseline(0.02),
        (result(0.03), {}),
        (result(0.03), {}),
        slack=0.0,
        elsewhere=Elsewhere(busy(0.1)),
    )
    assert (
        "confirmed in a fresh process (another address layout): min 0.1 ms = 5.00x"
        in outcome.message
    )


@pytest.mark.parametrize(
    ("base", "now"),
    [
        (0.02, 0.06),  # 3x: more than an address layout does
        (1.0, 1.5),  # a call long enough not to be the interpreter's dispatch
        (0.02, 0.021),  # within the limit
    ],
)
def test_a_fresh_process_is_asked_only_where_an_address_layout_could_explain(base, now):
    fresh = Elsewhere(result(base))
    outcome, _ = compare(
        baseline(base), (result(now), {}), (result(now), {}), slack=0.0, elsewhere=fresh
    )
    assert fresh.calls == 0
    assert outcome.status == ("pass" if now / base < 1.3 else "fail")


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_other_thread_count_is_not_judged(strict, status):
    outcome, calls = compare(baseline(1.0, threads=8), strict=strict)
    assert (outcome.status, calls) == (status, 0)
    assert "recorded with 8 thread(s), this run measures with 2" in outcome.message
    assert "(--torch-perf-threads=8)" in outcome.message
    assert (outcome.record.verdict, outcome.record.measured_ms) == ("not comparable", None)
    assert outcome.record.reference_ms == 1.0


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_missing_baseline(strict, status):
    outcome = checks.missing_outcome("t.py::test_x", "cpu: Example CPU x 2", strict)
    assert outcome.status == status
    assert isinstance(outcome.error(), checks.PerfNotJudgedError)
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
    assert outcome.record.verdict == "REGRESSION (baseline from torch 2.9.0)"


def test_a_pass_across_torch_versions_says_so_in_the_table():
    outcome, _ = compare(baseline(1.0, torch="2.9.0"), (result(1.0), {}))
    assert outcome.status == "pass"
    assert outcome.record.verdict == "ok (baseline from torch 2.9.0)"
    assert "baseline from torch 2.9.0, now 2.13.0" in outcome.message
    assert comparison._with_version("ok (machine busy)", "2.9.0", "2.13.0") == (
        "ok (machine busy; baseline from torch 2.9.0)"
    )
    same, _ = compare(baseline(1.0), (result(1.0), {}))
    assert same.record.verdict == "ok"


def test_recording_flags_noisy_measurements():
    noisy = LatencyResult((1.0, 2.0, 3.0, 4.0), 5.0, 3, 1, "cpu", 2, "time cap")
    recorded = checks.new_baseline(noisy, {}, "2.13.0")
    outcome = checks.record_outcome("t::x", recorded, {}, noisy)
    assert outcome.record.verdict.startswith("recorded (noisy")
    assert "re-record on a quieter machine" in outcome.message
    assert (recorded.threads, recorded.stat, recorded.latency_ms) == (2, "min", 1.0)
    assert recorded.recorded.endswith("+00:00")
    assert recorded.core_probe_us is None  # no monitor, no core probe
    found = Interference("run-queue wait", 0.0, 0, 4, core_probe_s=9.6e-6)
    watched = LatencyResult((1.0, 2.0), 5.0, 3, 1, "cpu", 2, "spread", (), found)
    assert checks.new_baseline(watched, {}, "2.13.0").core_probe_us == pytest.approx(9.6)


def test_records_survive_the_trip_through_report_properties():
    from pytest_torch.perf.check_records import PerfRecord, render_table

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
    from pytest_torch.perf.check_records import PerfRecord, render_table

    under = checks.budget_record("t::fast", result(0.0532), checks.Budget(50.0), "within budget")
    over = checks.budget_record("t::slow", result(30.0), checks.Budget(20.0), "OVER BUDGET")
    rows = render_table([under, over])[2:]
    assert "0.1 % of budget" in rows[0] and "-99" not in rows[0]
    assert "150 % of budget" in rows[1]
    properties = dict(under.to_properties())
    assert "torch_perf.t::fast.change_pct" not in properties
    (decoded,) = PerfRecord.from_properties(under.to_properties())
    assert decoded.check == "budget" and decoded.change_pct is None


def record(*measurements, strict=False):
    pending = list(measurements)
    outcome = checks.record("t::x", lambda: pending.pop(0), "2.13.0", strict)
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
