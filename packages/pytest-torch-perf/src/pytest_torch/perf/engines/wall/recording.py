"""Recording a wall-clock baseline: measured a few times, the fastest undisturbed
measurement kept, and what a check says when there is no baseline for this machine."""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable, Mapping

from pytest_torch.core.units import MIB
from pytest_torch.perf.engines.wall.entry import Baseline
from pytest_torch.perf.engines.wall.settling import Measured, busy_advice
from pytest_torch.perf.engines.wall.timing import LatencyResult, fmt_ms
from pytest_torch.perf.options import UPDATE
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord

#: The statistic baselines record and regressions compare: the fastest sample. Time
#: taken by other processes, other xdist workers and the scheduler only ever adds to a
#: sample, so the minimum moves least when the machine is busy while still moving with
#: the code; benchmarks/perf_estimators.py measures it against the median and p10.
REGRESSION_STAT = "min"
#: Independent undisturbed measurements taken when recording; the fastest is kept.
RECORD_MEASUREMENTS = 3
#: A recorded measurement whose IQR exceeds this share of its median is flagged noisy.
NOISY_SPREAD = 0.15


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
        measured=baseline.latency_ms,
        reference=None,
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
        f" pytest {UPDATE}; it is kept per machine, so numbers from other"
        f" machines are never used"
    )
    row = PerfRecord(label, "baseline", REGRESSION_STAT, None, "no baseline")
    return Outcome("fail" if strict else "skip", message, row, judged=False)
