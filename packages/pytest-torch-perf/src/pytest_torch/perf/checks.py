"""Judging measurements: latency budgets, recording baselines, and what a check decides
(:class:`Outcome`, the errors it raises); comparing with a baseline is ``comparison``.

Everything here works on measurements handed in, so it can be tested with made-up
numbers; ``check_runner`` and ``suites.runner`` do the measuring, the regression rule
itself (tolerances, limit, "improved") is ``rule``, and how repeated measurements on a
busy machine settle a verdict is ``measure.settling``: a busy measurement fails only
when no interference that was measured can explain how far it is over the limit.
"""

from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pytest_torch.core.units import MIB
from pytest_torch.perf.baselines import Baseline
from pytest_torch.perf.check_records import PerfRecord
from pytest_torch.perf.markers import LATENCY
from pytest_torch.perf.measure.settling import (
    NOT_JUDGED,
    Measured,
    Settled,
    busy_advice,
    counted,
    disturbance,
    generous_reading,
    machine_line,
    settle,
)
from pytest_torch.perf.measure.timing import STATISTICS, LatencyResult, fmt_ms


class PerfRegressionError(AssertionError):
    """A perf check failed: over its latency budget, or slower than its baseline."""


class PerfNotJudgedError(AssertionError):
    """With ``--torch-perf-strict``: a perf check that could not be made (no baseline for
    this machine, another thread count, a machine too busy to judge or to record on)."""


#: The statistic baselines record and regressions compare: the fastest sample. Time
#: taken by other processes, other xdist workers and the scheduler only ever adds to a
#: sample, so the minimum moves least when the machine is busy while still moving with
#: the code; benchmarks/perf_estimators.py measures it against the median and p10.
REGRESSION_STAT = "min"
#: Independent undisturbed measurements taken when recording; the fastest is kept.
RECORD_MEASUREMENTS = 3
#: A recorded measurement whose IQR exceeds this share of its median is flagged noisy.
NOISY_SPREAD = 0.15


@dataclass(frozen=True)
class Budget:
    ms: float
    stat: str = "median"


def finite_number(value: object) -> TypeGuard[float]:
    """A real number, not a bool, NaN or an infinity (a budget that can never fail)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def parse_budget(args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> Budget:
    """Budget from ``torch_max_latency`` marker arguments; ValueError naming ``where``."""
    example = f"Example: {LATENCY.example}"
    bound = LATENCY.bind(args, kwargs, f"{where}: @pytest.mark.{LATENCY.name}")
    ms, stat = bound["ms"], bound["stat"]
    if not finite_number(ms) or not ms > 0:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency needs a positive, finite budget in"
            f" milliseconds, got {ms!r}. {example}"
        )
    if stat not in STATISTICS:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency stat must be one of"
            f" {', '.join(STATISTICS)}, got {stat!r}. {example}"
        )
    return Budget(float(ms), str(stat))


def budget_record(label: str, result: LatencyResult, budget: Budget, verdict: str) -> PerfRecord:
    measured = result.stat(budget.stat)
    return PerfRecord(
        label=label,
        check="budget",
        stat=budget.stat,
        measured_ms=measured,
        reference_ms=budget.ms,
        # a budget is a ceiling, not a reference to move away from: the table shows the
        # share of the budget used (measured / reference), never "-99 %"
        change_pct=None,
        verdict=verdict,
        spread_pct=100 * result.spread,
    )


def budget_failure(
    result: LatencyResult, budget: Budget, settled: Settled | None = None
) -> str | None:
    """The failure message when ``result`` exceeds ``budget``, else None (``settled``:
    how the measurements that decided it went)."""
    measured = result.stat(budget.stat)
    if measured <= budget.ms:
        return None
    lines = [
        f"latency budget exceeded: {budget.stat} {fmt_ms(measured)} > budget"
        f" {fmt_ms(budget.ms)} (+{100 * (measured / budget.ms - 1):.1f} %)",
        f"  distribution: {result.describe()}",
    ]
    machine = machine_line(
        result, settled or Settled("over", [(result, {})], ("over",)), budget.stat, budget.ms
    )
    if machine:
        lines.append(machine)
    lines.append(
        "  what to try: profile one call (torch.profiler) to find the slow op;"
        " check the device and the thread count (--torch-perf-threads); make the"
        " model or batch smaller; if this machine is simply slower than the one the"
        " budget was set on, raise ms= in @pytest.mark.torch_max_latency or compare"
        " against a per-machine baseline with perf_baseline instead."
    )
    return "\n".join(lines)


def check_budget(
    label: str, measure: Callable[[], LatencyResult], budget: Budget, strict: bool
) -> Outcome:
    """Judge a latency budget: within it, over it twice (on undisturbed samples, or by
    more than interference can explain), or not judged."""
    settled = settle(
        lambda: (measure(), {}),
        lambda r: r.stat(budget.stat) > budget.ms,
        lambda r: counted(r.busy, False, r.generous(budget.stat) > budget.ms),
    )
    result = settled.last[0]
    notes = settled.notes(lambda r: r.stat(budget.stat))
    if settled.decision == "within":
        verdict = "within budget (machine busy)" if result.busy else "within budget"
        record = budget_record(label, result, budget, verdict)
        return Outcome("pass", f"{label}: {verdict}", record, measured=result, notes=notes)
    if settled.decision == "over":
        verdict = "OVER BUDGET (machine busy)" if settled.generous else "OVER BUDGET"
        record = budget_record(label, result, budget, verdict)
        message = budget_failure(result, budget, settled) or ""
        message += "".join(f"\n  note: {note}" for note in notes)
        return Outcome("fail", message, record, measured=result, notes=notes)
    record = budget_record(label, result, budget, NOT_JUDGED)
    assert result.interference is not None  # only a monitor makes a measurement busy
    message = "\n".join(
        [
            f"{label}: {NOT_JUDGED}. The {budget.stat} latency {fmt_ms(result.stat(budget.stat))}"
            f" is over the budget of {fmt_ms(budget.ms)}, but {disturbance(result)};"
            f" {generous_reading(result, budget.stat, budget.ms)}.",
            f"  {notes[0]}" if notes else "",
            f"  {busy_advice(strict)}",
        ]
    )
    return Outcome(
        "fail" if strict else "skip", message, record, measured=result, notes=notes, judged=False
    )


@dataclass
class Outcome:
    """What a check decided: "pass", "fail" or "skip", with the message."""

    status: str
    message: str
    record: PerfRecord
    baseline: Baseline | None = None
    measured: LatencyResult | None = None
    notes: list[str] = field(default_factory=list)
    #: False when the check could not be made (then "skip", or "fail" when strict)
    judged: bool = True

    def error(self) -> AssertionError:
        """What a failed check raises: never a regression when nothing was judged."""
        return (PerfRegressionError if self.judged else PerfNotJudgedError)(self.message)


def new_baseline(result: LatencyResult, memory: Mapping[str, int], torch_version: str) -> Baseline:
    found = result.interference
    core = None if found is None else found.core_probe_s
    busy = found is not None and found.disturbed
    return Baseline(
        latency_ms=result.stat(REGRESSION_STAT),
        stat=REGRESSION_STAT,
        spread=result.spread,
        device=result.device,
        threads=result.threads,
        torch=torch_version,
        python=platform.python_version(),
        recorded=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        peak_memory=dict(memory),
        core_probe_us=None if core is None else core * 1e6,
        samples=found.samples if busy and found is not None else None,
        undisturbed_samples=found.undisturbed if busy and found is not None else None,
    )


def record(
    label: str, measure: Callable[[], Measured], torch_version: str, strict: bool
) -> Outcome:
    """Measure a few times and keep the fastest as the baseline.

    Interference from other processes only ever adds time, so the fastest of several
    independent measurements is the best reference: one slow moment while recording
    must not inflate a baseline and hide later slowdowns. Each measurement counts by
    its undisturbed samples, however busy the machine was around them; a busy one (too
    few of them) is not used at all, and if every one was, nothing is recorded.
    """
    tried: list[Measured] = []
    clean: list[Measured] = []
    while len(clean) < RECORD_MEASUREMENTS and len(tried) < 2 * RECORD_MEASUREMENTS:
        tried.append(measure())
        if not tried[-1][0].busy:
            clean.append(tried[-1])
        elif len(tried) >= RECORD_MEASUREMENTS and not clean:
            break  # busy throughout: more tries would only cost time
    if not clean:
        result = tried[-1][0]
        found = result.interference
        assert found is not None  # only a monitor makes a measurement busy
        verdict = "not recorded: machine busy"
        message = (
            f"{label}: {verdict}. A baseline is recorded from undisturbed samples (at least"
            f" {found.min_undisturbed}, adding up to {fmt_ms(1e3 * found.min_undisturbed_s)}),"
            f" but other processes disturbed all {len(tried)} measurements too much:"
            f" {found.evidence()}. {busy_advice(strict)}"
        )
        row = PerfRecord(label, "baseline", REGRESSION_STAT, result.stat(REGRESSION_STAT), verdict)
        return Outcome("fail" if strict else "skip", message, row, measured=result, judged=False)
    result, memory = min(clean, key=lambda m: m[0].stat(REGRESSION_STAT))
    return record_outcome(label, new_baseline(result, memory, torch_version), memory, result)


def record_outcome(
    label: str, baseline: Baseline, memory: Mapping[str, int], measured: LatencyResult | None
) -> Outcome:
    noisy = baseline.spread > NOISY_SPREAD
    notes = []
    if baseline.undisturbed_samples is not None:
        notes.append(
            f"busy machine: from {baseline.undisturbed_samples} of {baseline.samples}"
            f" samples, undisturbed"
        )
    if noisy:
        notes.append(f"noisy: IQR {100 * baseline.spread:.0f} %")
    verdict = f"recorded ({'; '.join(notes)})" if notes else "recorded"
    message = f"recorded {label}: {baseline.stat} {fmt_ms(baseline.latency_ms)}"
    if baseline.undisturbed_samples is not None:
        message += (
            f" on a busy machine, from the {baseline.undisturbed_samples} of"
            f" {baseline.samples} samples that nothing disturbed"
        )
    if noisy:
        message += (
            f"; the measurement was noisy (IQR {100 * baseline.spread:.0f} % of the median):"
            " re-record on a quieter machine for a reliable reference"
        )
    row = PerfRecord(
        label=label,
        check="baseline",
        stat=baseline.stat,
        measured_ms=baseline.latency_ms,
        reference_ms=None,
        change_pct=None,
        verdict=verdict,
        spread_pct=100 * baseline.spread,
        peak_memory_mb=peak_mb(memory),
    )
    return Outcome("pass", message, row, baseline, measured)


def peak_mb(memory: Mapping[str, int]) -> float | None:
    return max(memory.values()) / MIB if memory else None


def missing_outcome(label: str, machine: str, strict: bool) -> Outcome:
    message = (
        f"no perf baseline for {label} on this machine ({machine}). Record one with:"
        f" pytest --torch-update-perf; it is kept per machine, so numbers from other"
        f" machines are never used"
    )
    row = PerfRecord(label, "baseline", REGRESSION_STAT, None, "no baseline")
    return Outcome("fail" if strict else "skip", message, row, judged=False)
