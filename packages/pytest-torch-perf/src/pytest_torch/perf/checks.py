"""Judging measurements: latency budgets and baseline comparisons.

Everything here works on measurements handed in, so it can be tested with made-up
numbers; ``check_runner`` and ``suite_runner`` do the measuring, and the regression
rule itself (tolerances, limit, "improved") is ``rule``.

A measurement over its limit is taken again before anything fails, and a measurement
that other processes slowed down (``LatencyResult.busy``) never decides a failure:
two undisturbed measurements over the limit make a failure; one within it passes
(time lost to other processes only adds, so the code is at least that fast); when the
machine stays busy, the verdict is "not judged: machine busy" with its figures.
"""

from __future__ import annotations

import datetime
import math
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pytest_torch.perf.baselines import Baseline
from pytest_torch.perf.marker_specs import LATENCY
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import (
    MEMORY_SLACK_BYTES,
    improved,
    judge,
    latency_limit_text,
    memory_limit_text,
)
from pytest_torch.perf.timing import STATISTICS, LatencyResult, fmt_ms


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
#: Measurements one verdict may take (a limit crossed is measured again).
MAX_MEASUREMENTS = 3
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


Measured = tuple[LatencyResult, Mapping[str, int]]


@dataclass(frozen=True)
class Settled:
    """How repeated measurements ended: "within" the limit, "over" it in two undisturbed
    measurements, or "busy" (over it only while other processes held the CPU)."""

    decision: str
    taken: list[Measured]

    @property
    def last(self) -> Measured:
        return self.taken[-1]

    def notes(self, value: Callable[[LatencyResult], float]) -> list[str]:
        """What the measurements said, for the message (``value``: the statistic)."""

        def shown(result: LatencyResult) -> str:
            return f"{fmt_ms(value(result))}{' (machine busy)' if result.busy else ''}"

        *earlier, last = [result for result, _ in self.taken]
        if self.decision == "within":
            notes = []
            if earlier:
                notes.append(
                    f"over the limit at first ({', '.join(map(shown, earlier))}), then within"
                    f" it ({fmt_ms(value(last))}): treated as noise"
                )
            if last.busy and last.interference is not None:
                notes.append(
                    f"measured while the machine was busy ({last.interference.evidence()});"
                    " within the limit even so: time taken by other processes only adds, so"
                    " the code is at least this fast"
                )
            return notes
        if self.decision == "over":
            first = next(result for result in earlier if not result.busy)
            note = f"confirmed by a second measurement (first: {fmt_ms(value(first))})"
            busy = [fmt_ms(value(result)) for result in earlier if result.busy]
            if busy:
                note += f"; taken while the machine was busy and not counted: {', '.join(busy)}"
            return [note]
        return [f"measured {len(self.taken)} times: {', '.join(map(shown, [*earlier, last]))}"]


def settle(measure: Callable[[], Measured], over: Callable[[LatencyResult], bool]) -> Settled:
    """Measure until the verdict is clear (at most :data:`MAX_MEASUREMENTS` times)."""
    taken: list[Measured] = []
    clean_over = busy_over = 0
    while True:
        taken.append(measure())
        result = taken[-1][0]
        if not over(result):
            return Settled("within", taken)
        if result.busy:
            busy_over += 1
        else:
            clean_over += 1
        if clean_over == 2:
            return Settled("over", taken)
        if busy_over == 2 or len(taken) >= MAX_MEASUREMENTS:
            return Settled("busy", taken)


NOT_JUDGED = "not judged: machine busy"


def busy_advice(strict: bool) -> str:
    what = "failed (--torch-perf-strict)" if strict else "skipped (--torch-perf-strict fails it)"
    return (
        f"This test is {what}. Run perf tests where nothing else competes for the cores:"
        " no heavy jobs beside them, and no more xdist workers x --torch-perf-threads"
        " than cores."
    )


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


def budget_failure(result: LatencyResult, budget: Budget) -> str | None:
    """The failure message when ``result`` exceeds ``budget``, else None."""
    measured = result.stat(budget.stat)
    if measured <= budget.ms:
        return None
    lines = [
        f"latency budget exceeded: {budget.stat} {fmt_ms(measured)} > budget"
        f" {fmt_ms(budget.ms)} (+{100 * (measured / budget.ms - 1):.1f} %)",
        f"  distribution: {result.describe()}",
    ]
    if result.interference is not None:
        lines.append(f"  machine: not busy ({result.interference.evidence()})")
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
    """Judge a latency budget: within it, over it twice undisturbed, or not judged."""
    settled = settle(lambda: (measure(), {}), lambda r: r.stat(budget.stat) > budget.ms)
    result = settled.last[0]
    notes = settled.notes(lambda r: r.stat(budget.stat))
    if settled.decision == "within":
        verdict = "within budget (machine busy)" if result.busy else "within budget"
        record = budget_record(label, result, budget, verdict)
        return Outcome("pass", f"{label}: {verdict}", record, measured=result, notes=notes)
    if settled.decision == "over":
        record = budget_record(label, result, budget, "OVER BUDGET")
        message = budget_failure(result, budget) or ""
        message += "".join(f"\n  note: {note}" for note in notes)
        return Outcome("fail", message, record, measured=result, notes=notes)
    record = budget_record(label, result, budget, NOT_JUDGED)
    assert result.interference is not None  # only a probe makes a measurement busy
    message = "\n".join(
        [
            f"{label}: {NOT_JUDGED}. The {budget.stat} latency {fmt_ms(result.stat(budget.stat))}"
            f" is over the budget of {fmt_ms(budget.ms)}, but other processes slowed the"
            f" measurement down: {result.interference.evidence()}.",
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
    loop = None if result.interference is None else result.interference.reference_loop_s
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
        reference_loop_us=None if loop is None else loop * 1e6,
    )


def record(
    label: str, measure: Callable[[], Measured], torch_version: str, strict: bool
) -> Outcome:
    """Measure a few times and keep the fastest as the baseline.

    Interference from other processes only ever adds time, so the fastest of several
    independent measurements is the best reference: one slow moment while recording
    must not inflate a baseline and hide later slowdowns. Measurements taken while the
    machine was busy are not used at all; if every one was, nothing is recorded.
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
        assert result.interference is not None  # only a probe makes a measurement busy
        verdict = "not recorded: machine busy"
        message = (
            f"{label}: {verdict}. A baseline must be measured on a quiet machine, but"
            f" other processes slowed all {len(tried)} measurements down:"
            f" {result.interference.evidence()}. {busy_advice(strict)}"
        )
        row = PerfRecord(label, "baseline", REGRESSION_STAT, result.stat(REGRESSION_STAT), verdict)
        return Outcome("fail" if strict else "skip", message, row, measured=result, judged=False)
    result, memory = min(clean, key=lambda m: m[0].stat(REGRESSION_STAT))
    return record_outcome(label, new_baseline(result, memory, torch_version), memory, result)


def record_outcome(
    label: str, baseline: Baseline, memory: Mapping[str, int], measured: LatencyResult | None
) -> Outcome:
    noisy = baseline.spread > NOISY_SPREAD
    verdict = f"recorded (noisy: IQR {100 * baseline.spread:.0f} %)" if noisy else "recorded"
    message = f"recorded {label}: {baseline.stat} {fmt_ms(baseline.latency_ms)}"
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
        peak_memory_mb=_peak_mb(memory),
    )
    return Outcome("pass", message, row, baseline, measured)


def _peak_mb(memory: Mapping[str, int]) -> float | None:
    return max(memory.values()) / 2**20 if memory else None


def missing_outcome(label: str, machine: str, strict: bool) -> Outcome:
    message = (
        f"no perf baseline for {label} on this machine ({machine}). Record one with:"
        f" pytest --torch-update-perf; it is kept per machine, so numbers from other"
        f" machines are never used"
    )
    row = PerfRecord(label, "baseline", REGRESSION_STAT, None, "no baseline")
    return Outcome("fail" if strict else "skip", message, row, judged=False)


def _memory_failures(
    memory: Mapping[str, int], baseline: Baseline, memory_tolerance: float
) -> list[str]:
    failures = []
    for device, peak in sorted(memory.items()):
        before = baseline.peak_memory.get(device)
        if before is None:
            continue
        verdict = judge(peak, before, memory_tolerance, MEMORY_SLACK_BYTES)
        if verdict.regressed:
            failures.append(
                f"  peak memory on {device}: {peak / 2**20:.1f} MiB vs baseline"
                f" {before / 2**20:.1f} MiB ({100 * verdict.change:+.1f} %;"
                f" {memory_limit_text(verdict, memory_tolerance)})"
            )
    return failures


def _with_version(verdict: str, recorded: str, now: str) -> str:
    """The table's verdict, with the torch the baseline was recorded under when it is not
    this one: a pass across torch versions is worth a look, a slowdown may be torch's."""
    if recorded == now:
        return verdict
    note = f"baseline from torch {recorded}"
    if verdict.endswith(")"):
        return f"{verdict[:-1]}; {note})"
    return f"{verdict} ({note})"


def compare(
    label: str,
    baseline: Baseline,
    measure: Callable[[], Measured],
    *,
    threads: int,
    torch_version: str,
    tolerance: float,
    memory_tolerance: float,
    slack_ms: float,
    strict: bool,
    machine: str,
    rerecord: str,
) -> Outcome:
    """Compare new measurements with ``baseline`` on the statistic it recorded."""
    stat = baseline.stat
    if baseline.threads != threads or stat not in STATISTICS:
        why = (
            f"the baseline was recorded with {baseline.threads} thread(s), this run"
            f" measures with {threads}; timings under different thread counts are not"
            f" comparable. Measure with the same count (--torch-perf-threads"
            f"={baseline.threads})"
            if baseline.threads != threads
            else f"the baseline records the statistic {stat!r}, which this version does not"
            f" compute. Re-record"
        )
        message = f"{label}: {why}, or re-record with: {rerecord}"
        row = PerfRecord(label, "baseline", stat, None, "not comparable", baseline.latency_ms)
        return Outcome("fail" if strict else "skip", message, row, baseline, judged=False)

    def value(result: LatencyResult) -> float:
        return result.stat(stat)

    settled = settle(
        measure, lambda r: judge(value(r), baseline.latency_ms, tolerance, slack_ms).regressed
    )
    result, memory = settled.last
    latency = judge(value(result), baseline.latency_ms, tolerance, slack_ms)
    notes = settled.notes(value)
    memory_failures = _memory_failures(memory, baseline, memory_tolerance)
    version_note = (
        f"; baseline from torch {baseline.torch}, now {torch_version}"
        if baseline.torch != torch_version
        else ""
    )
    regressed = settled.decision == "over"
    if regressed:
        verdict_text = "REGRESSION"
    elif memory_failures:
        verdict_text = "MEMORY REGRESSION"
    elif settled.decision == "busy":
        verdict_text = NOT_JUDGED
    elif improved(latency, tolerance):
        verdict_text = f"improved {100 * -latency.change:.0f} %"
    else:
        verdict_text = "ok (machine busy)" if result.busy else "ok"
    row = PerfRecord(
        label=label,
        check="baseline",
        stat=stat,
        measured_ms=value(result),
        reference_ms=baseline.latency_ms,
        change_pct=100 * latency.change,
        verdict=_with_version(verdict_text, baseline.torch, torch_version),
        spread_pct=100 * result.spread,
        peak_memory_mb=_peak_mb(memory),
    )
    limit = latency_limit_text(latency, tolerance, slack_ms)
    if verdict_text == NOT_JUDGED:
        assert result.interference is not None  # only a probe makes a measurement busy
        message = "\n".join(
            [
                f"{label}: {NOT_JUDGED}. {stat} {fmt_ms(value(result))} vs baseline"
                f" {fmt_ms(baseline.latency_ms)} = {latency.ratio:.2f}x is over the {limit},"
                f" but other processes slowed the measurement down:"
                f" {result.interference.evidence()}.",
                f"  {notes[0]}",
                f"  {busy_advice(strict)}",
            ]
        )
        status = "fail" if strict else "skip"
        return Outcome(status, message, row, baseline, result, notes, judged=False)
    if not regressed and not memory_failures:
        message = f"{label}: {verdict_text} ({100 * latency.change:+.1f} %){version_note}"
        if verdict_text.startswith("improved"):
            message += f"; consider re-recording with: {rerecord}"
        return Outcome("pass", message, row, baseline, result, notes)
    lines = [f"performance regression in {label}:"]
    if regressed:
        lines.append(
            f"  latency ({stat}): {fmt_ms(value(result))} vs baseline"
            f" {fmt_ms(baseline.latency_ms)} = {latency.ratio:.2f}x"
            f" ({100 * latency.change:+.1f} %); {limit}"
        )
    lines += memory_failures
    lines.append(f"  now: {result.describe()}")
    if regressed and result.interference is not None:
        lines.append(f"  machine: not busy ({result.interference.evidence()})")
    lines.append(
        f"  baseline: recorded {baseline.recorded} with torch {baseline.torch},"
        f" {baseline.threads} thread(s), on {machine}{version_note}"
    )
    lines += [f"  note: {note}" for note in notes]
    lines.append(
        f"  If the slowdown is intended (a bigger model, a new feature), re-record with: {rerecord}"
    )
    return Outcome("fail", "\n".join(lines), row, baseline, result, notes)
