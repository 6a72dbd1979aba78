"""Unit tests of judging against a baseline (the wall-clock engine), with made-up
measurements: limits, busy machines, slower cores, a fresh process, memory, versions."""

from __future__ import annotations

import pytest

from pytest_torch.perf import outcome as outcomes
from pytest_torch.perf.engines.wall import comparison, recording
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
    assert outcome.record.measured == pytest.approx(2.2)
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
    assert type(outcome.error()) is outcomes.PerfRegressionError
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
    assert outcome.record.measured == 0.021
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
    assert (outcome.record.verdict, outcome.record.measured) == ("not comparable", None)
    assert outcome.record.reference == 1.0


@pytest.mark.parametrize(("strict", "status"), [(False, "skip"), (True, "fail")])
def test_missing_baseline(strict, status):
    outcome = recording.missing_outcome("t.py::test_x", "cpu: Example CPU x 2", strict)
    assert outcome.status == status
    assert isinstance(outcome.error(), outcomes.PerfNotJudgedError)
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
