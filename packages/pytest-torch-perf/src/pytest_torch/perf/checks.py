"""Judging measurements: latency budgets and baseline comparisons.

Everything here works on measurements handed in, so it can be tested with made-up
numbers; the pytest wiring in ``plugin.py`` does the measuring.
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_torch.perf.baselines import Baseline, judge
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.timing import STATISTICS, LatencyResult, fmt_ms


class PerfRegressionError(AssertionError):
    """A perf check failed: over its latency budget, or slower than its baseline."""


#: Peak-memory growth below this is never a regression (allocator rounding).
MEMORY_SLACK_BYTES = 1 << 20
#: Independent measurements taken when recording; the fastest median is kept.
RECORD_MEASUREMENTS = 3
#: A recorded measurement whose IQR exceeds this share of its median is flagged noisy.
NOISY_SPREAD = 0.15


@dataclass(frozen=True)
class Budget:
    ms: float
    stat: str = "median"


def parse_budget(args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> Budget:
    """Budget from ``torch_max_latency`` marker arguments; ValueError naming ``where``."""
    example = "Example: @pytest.mark.torch_max_latency(ms=50) or (50, stat='p90')"
    unknown = set(kwargs) - {"ms", "stat"}
    if unknown:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency got unknown keyword(s)"
            f" {', '.join(sorted(unknown))}; it takes ms= and stat=. {example}"
        )
    if len(args) > 2 or (args and "ms" in kwargs) or (len(args) > 1 and "stat" in kwargs):
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency takes ms and stat once. {example}"
        )
    ms = args[0] if args else kwargs.get("ms")
    stat = args[1] if len(args) > 1 else kwargs.get("stat", "median")
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms > 0:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency needs a positive budget in"
            f" milliseconds, got {ms!r}. {example}"
        )
    if stat not in STATISTICS:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency stat must be one of"
            f" {', '.join(STATISTICS)}, got {stat!r}. {example}"
        )
    return Budget(float(ms), str(stat))


def budget_record(label: str, result: LatencyResult, budget: Budget) -> PerfRecord:
    measured = result.stat(budget.stat)
    over = measured > budget.ms
    return PerfRecord(
        label=label,
        check="budget",
        stat=budget.stat,
        measured_ms=measured,
        reference_ms=budget.ms,
        change_pct=100 * (measured / budget.ms - 1),
        verdict="OVER BUDGET" if over else "within budget",
        spread_pct=100 * result.spread,
    )


def budget_failure(result: LatencyResult, budget: Budget) -> str | None:
    """The failure message when ``result`` exceeds ``budget``, else None."""
    measured = result.stat(budget.stat)
    if measured <= budget.ms:
        return None
    return "\n".join(
        [
            f"latency budget exceeded: {budget.stat} {fmt_ms(measured)} > budget"
            f" {fmt_ms(budget.ms)} (+{100 * (measured / budget.ms - 1):.1f} %)",
            f"  distribution: {result.describe()}",
            "  what to try: profile one call (torch.profiler) to find the slow op;"
            " check the thread count (torch.get_num_threads()) and the device; make the"
            " model or batch smaller; if this machine is simply slower than the one the"
            " budget was set on, raise ms= in @pytest.mark.torch_max_latency or compare"
            " against a per-machine baseline with perf_baseline instead.",
        ]
    )


@dataclass
class Outcome:
    """What a baseline check decided: "pass", "fail" or "skip", with the message."""

    status: str
    message: str
    record: PerfRecord
    baseline: Baseline | None = None
    measured: LatencyResult | None = None
    notes: list[str] = field(default_factory=list)


def new_baseline(result: LatencyResult, memory: Mapping[str, int], torch_version: str) -> Baseline:
    return Baseline(
        latency_ms=result.median,
        stat="median",
        spread=result.spread,
        device=result.device,
        threads=result.threads,
        torch=torch_version,
        python=platform.python_version(),
        recorded=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        peak_memory=dict(memory),
    )


def record(
    measure: Callable[[], tuple[LatencyResult, Mapping[str, int]]], torch_version: str
) -> tuple[Baseline, Mapping[str, int]]:
    """Measure a few times and keep the fastest as the baseline.

    Interference from other processes only ever adds time, so the fastest of several
    independent measurements is the best reference: one slow moment while recording
    must not inflate a baseline and hide later slowdowns.
    """
    result, memory = min((measure() for _ in range(RECORD_MEASUREMENTS)), key=lambda m: m[0].median)
    return new_baseline(result, memory, torch_version), memory


def record_outcome(label: str, baseline: Baseline, memory: Mapping[str, int]) -> Outcome:
    noisy = baseline.spread > NOISY_SPREAD
    verdict = f"recorded (noisy: IQR {100 * baseline.spread:.0f} %)" if noisy else "recorded"
    message = f"recorded {label}: median {fmt_ms(baseline.latency_ms)}"
    if noisy:
        message += (
            f"; the measurement was noisy (IQR {100 * baseline.spread:.0f} % of the median):"
            " re-record on a quieter machine for a reliable reference"
        )
    record = PerfRecord(
        label=label,
        check="baseline",
        stat="median",
        measured_ms=baseline.latency_ms,
        reference_ms=None,
        change_pct=None,
        verdict=verdict,
        spread_pct=100 * baseline.spread,
        peak_memory_mb=_peak_mb(memory),
    )
    return Outcome("pass", message, record, baseline)


def _peak_mb(memory: Mapping[str, int]) -> float | None:
    return max(memory.values()) / 2**20 if memory else None


def missing_outcome(label: str, machine: str, strict: bool) -> Outcome:
    message = (
        f"no perf baseline for {label} on this machine ({machine}). Record one with:"
        f" pytest --torch-update-perf (without -n); it is kept per machine, so numbers from"
        f" other machines are never used"
    )
    record = PerfRecord(label, "baseline", "median", None, "no baseline")
    return Outcome("fail" if strict else "skip", message, record)


def compare(
    label: str,
    baseline: Baseline,
    measure: Callable[[], tuple[LatencyResult, Mapping[str, int]]],
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
    """Compare a new measurement with ``baseline``; a regression is measured twice."""
    if baseline.threads != threads:
        message = (
            f"{label}: the baseline was recorded with {baseline.threads} thread(s), this run"
            f" uses {threads}; timings under different thread counts are not comparable."
            f" Run with the same count (torch.set_num_threads({baseline.threads}) or"
            f" --torch-num-threads), or re-record with: {rerecord}"
        )
        record = PerfRecord(
            label, "baseline", baseline.stat, None, "not comparable", baseline.latency_ms
        )
        return Outcome("fail" if strict else "skip", message, record, baseline)

    result, memory = measure()
    latency = judge(result.median, baseline.latency_ms, tolerance, slack_ms)
    notes = []
    if latency.regressed:
        first = result
        result, memory = measure()
        latency = judge(result.median, baseline.latency_ms, tolerance, slack_ms)
        if not latency.regressed:
            notes.append(
                f"the first measurement ({fmt_ms(first.median)}) was over the limit, the"
                f" confirmation ({fmt_ms(result.median)}) was not: treated as noise"
            )
        else:
            notes.append(f"confirmed by a second measurement (first: {fmt_ms(first.median)})")
    memory_failures = []
    for device, peak in sorted(memory.items()):
        before = baseline.peak_memory.get(device)
        if before is None:
            continue
        verdict = judge(peak, before, memory_tolerance, MEMORY_SLACK_BYTES)
        if verdict.regressed:
            memory_failures.append(
                f"  peak memory on {device}: {peak / 2**20:.1f} MiB vs baseline"
                f" {before / 2**20:.1f} MiB ({100 * verdict.change:+.1f} %; limit"
                f" {verdict.limit / 2**20:.1f} MiB = baseline x (1 + {memory_tolerance:g})"
                f" + 1 MiB)"
            )
    version_note = (
        f"; baseline from torch {baseline.torch}, now {torch_version}"
        if baseline.torch != torch_version
        else ""
    )
    if latency.regressed:
        verdict_text = "REGRESSION"
    elif memory_failures:
        verdict_text = "MEMORY REGRESSION"
    elif latency.change < -tolerance:
        verdict_text = f"improved {100 * -latency.change:.0f} %"
    else:
        verdict_text = "ok"
    record = PerfRecord(
        label=label,
        check="baseline",
        stat="median",
        measured_ms=result.median,
        reference_ms=baseline.latency_ms,
        change_pct=100 * latency.change,
        verdict=verdict_text,
        spread_pct=100 * result.spread,
        peak_memory_mb=_peak_mb(memory),
    )
    if not latency.regressed and not memory_failures:
        message = f"{label}: {verdict_text} ({100 * latency.change:+.1f} %){version_note}"
        if verdict_text.startswith("improved"):
            message += f"; consider re-recording with: {rerecord}"
        return Outcome("pass", message, record, baseline, result, notes)
    lines = [f"performance regression in {label}:"]
    if latency.regressed:
        lines.append(
            f"  latency (median): {fmt_ms(result.median)} vs baseline"
            f" {fmt_ms(baseline.latency_ms)} = {latency.ratio:.2f}x"
            f" ({100 * latency.change:+.1f} %); limit {fmt_ms(latency.limit)} = baseline x"
            f" (1 + tolerance {tolerance:g}) + slack {fmt_ms(slack_ms)}"
        )
    lines += memory_failures
    lines.append(f"  now: {result.describe()}")
    lines.append(
        f"  baseline: recorded {baseline.recorded} with torch {baseline.torch},"
        f" {baseline.threads} thread(s), on {machine}{version_note}"
    )
    lines += [f"  note: {note}" for note in notes]
    lines.append(
        f"  If the slowdown is intended (a bigger model, a new feature), re-record with: {rerecord}"
    )
    return Outcome("fail", "\n".join(lines), record, baseline, result, notes)
