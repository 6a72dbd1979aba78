"""Comparing new measurements with a baseline: settled in proportion to the interference,
a short call's modest regression measured again in a fresh process, peak memory, and the
verdict and message a person reads (a regression, a pass, or "not judged").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pytest_torch.core.units import MIB
from pytest_torch.perf.engines.wall.entry import Baseline
from pytest_torch.perf.engines.wall.recording import peak_mb
from pytest_torch.perf.engines.wall.settling import (
    BUSY,
    NOT_JUDGED,
    NOT_JUDGED_HOST,
    Measured,
    Settled,
    busy_advice,
    counted,
    fresh_confirmed,
    fresh_disturbed,
    fresh_within,
    host_factor,
    in_layout_reach,
    layout_note,
    machine_line,
    not_judged_cause,
    settle,
    slower_host_advice,
)
from pytest_torch.perf.engines.wall.timing import STATISTICS, LatencyResult, fmt_ms
from pytest_torch.perf.options import THREADS
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import (
    MEMORY_SLACK_BYTES,
    Verdict,
    improved,
    judge,
    latency_limit_text,
    memory_limit_text,
)


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
                f"  peak memory on {device}: {peak / MIB:.1f} MiB vs baseline"
                f" {before / MIB:.1f} MiB ({100 * verdict.change:+.1f} %;"
                f" {memory_limit_text(verdict, memory_tolerance)})"
            )
    return failures


def _with_version(verdict: str, recorded: str, now: str) -> str:
    """The table's verdict, with the torch the baseline was recorded under when it is not
    this one: a pass across torch versions is worth a look, a slowdown may be torch's."""
    if recorded == now:
        return verdict
    return _annotated(verdict, f"baseline from torch {recorded}")


def _annotated(verdict: str, note: str) -> str:
    """``verdict`` with ``note`` in its parentheses."""
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
    elsewhere: Callable[[], Measured | str] | None = None,
) -> Outcome:
    """Compare new measurements with ``baseline`` on the statistic it recorded.

    ``elsewhere`` measures the call in a fresh process, or says why it could not: a
    short call's modest regression (``engines.wall.settling.in_layout_reach``) is measured
    there before it fails, and a fresh process within the limit decides (see
    ``fresh_process``)."""
    stat = baseline.stat
    if baseline.threads != threads or stat not in STATISTICS:
        return _not_comparable(label, baseline, threads, strict, rerecord)
    settled, latency, notes, fresh = _settle(baseline, measure, tolerance, slack_ms, elsewhere)
    result, memory = settled.last
    memory_failures = _memory_failures(memory, baseline, memory_tolerance)
    version_note = (
        ""
        if baseline.torch == torch_version
        else f"; baseline from torch {baseline.torch}, now {torch_version}"
    )
    verdict_text = _verdict_text(settled, latency, tolerance, bool(memory_failures))
    if not isinstance(fresh, str) and settled.decision == "within":
        verdict_text = _annotated(verdict_text, "in a fresh process")
    verdict = _with_version(verdict_text, baseline.torch, torch_version)
    row = _comparison_row(label, result, baseline, latency, memory, verdict)
    limit = latency_limit_text(latency, tolerance, slack_ms)
    host = host_factor(result, baseline)
    if verdict_text in (NOT_JUDGED, NOT_JUDGED_HOST):
        message = "\n".join(
            [
                f"{label}: {verdict_text}. {stat} {fmt_ms(result.stat(stat))} vs baseline"
                f" {fmt_ms(baseline.latency_ms)} = {latency.ratio:.2f}x is over the {limit},"
                f" but {not_judged_cause(result, baseline, host, stat, latency.limit)}.",
                f"  {notes[0]}",
                f"  {busy_advice(strict) if result.busy else slower_host_advice(strict)}",
            ]
        )
        status = "fail" if strict else "skip"
        return Outcome(status, message, row, baseline, result, notes, judged=False)
    if settled.decision != "over" and not memory_failures:
        message = f"{label}: {verdict_text} ({100 * latency.change:+.1f} %){version_note}"
        if verdict_text.startswith("improved"):
            message += f"; consider re-recording with: {rerecord}"
        if not isinstance(fresh, str):
            message += f"; {notes[0]}"
        return Outcome("pass", message, row, baseline, result, notes)
    lines = [f"performance regression in {label}:"]
    if settled.decision == "over":
        lines += _latency_lines(settled, latency, limit, host, fresh, memory_failures, baseline)
    else:
        lines += [*memory_failures, f"  now: {result.describe()}"]
    lines += [
        f"  baseline: recorded {baseline.recorded} with torch {baseline.torch},"
        f" {baseline.threads} thread(s), on {machine}{version_note}",
        *[f"  note: {note}" for note in notes],
        f"  If the slowdown is intended (a bigger model, a new feature), re-record with:"
        f" {rerecord}",
    ]
    return Outcome("fail", "\n".join(line for line in lines if line), row, baseline, result, notes)


def _settle(
    baseline: Baseline,
    measure: Callable[[], Measured],
    tolerance: float,
    slack_ms: float,
    elsewhere: Callable[[], Measured | str] | None,
) -> tuple[Settled, Verdict, list[str], Measured | str]:
    """Measure until the comparison settles; a short call's modest regression is then
    measured in a fresh process, which clears it when it is within the limit there.
    Returns how it settled, the last measurement's verdict, the notes, and the fresh
    process's measurement, or why there is none ("" when none was asked for)."""
    stat = baseline.stat

    def regressed(figure: float) -> bool:
        return judge(figure, baseline.latency_ms, tolerance, slack_ms).regressed

    def counts(result: LatencyResult) -> str:
        host = host_factor(result, baseline)
        return counted(result.busy, host > 1.0, regressed(result.generous(stat) / host))

    settled = settle(measure, lambda r: regressed(r.stat(stat)), counts)
    result, memory = settled.last
    latency = judge(result.stat(stat), baseline.latency_ms, tolerance, slack_ms)
    notes = settled.notes(lambda r: r.stat(stat))
    fresh: Measured | str = ""
    if (
        settled.decision == "over"
        and elsewhere is not None
        and in_layout_reach(baseline.latency_ms, latency.ratio)
    ):
        fresh = elsewhere()
    if not isinstance(fresh, str) and regressed(fresh[0].stat(stat)) and counts(fresh[0]) == BUSY:
        fresh = fresh_disturbed(stat, fresh[0])  # it can neither confirm nor clear it
    if not isinstance(fresh, str) and not regressed(fresh[0].stat(stat)):
        # another address layout, within the limit: the code is at least that fast
        notes = [fresh_within(stat, result.stat(stat), latency.ratio, fresh[0].stat(stat))]
        taken, kinds = [*settled.taken, (fresh[0], memory)], (*settled.kinds, "within")
        settled, result = Settled("within", taken, kinds), fresh[0]
        latency = judge(result.stat(stat), baseline.latency_ms, tolerance, slack_ms)
    return settled, latency, notes, fresh


def _latency_lines(
    settled: Settled,
    latency: Verdict,
    limit: str,
    host: float,
    fresh: Measured | str,
    memory_failures: list[str],
    baseline: Baseline,
) -> list[str]:
    """A latency regression's lines: the figures, the machine, the fresh process."""
    stat = baseline.stat
    result = settled.last[0]
    return [
        f"  latency ({stat}): {fmt_ms(result.stat(stat))} vs baseline"
        f" {fmt_ms(baseline.latency_ms)} = {latency.ratio:.2f}x"
        f" ({100 * latency.change:+.1f} %); {limit}",
        *memory_failures,
        f"  now: {result.describe()}",
        machine_line(result, settled, stat, latency.limit, host),
        layout_note(baseline.latency_ms, latency.ratio, fresh)
        if isinstance(fresh, str)
        else fresh_confirmed(stat, fresh[0].stat(stat), fresh[0].stat(stat) / baseline.latency_ms),
    ]


def _comparison_row(
    label: str,
    result: LatencyResult,
    baseline: Baseline,
    latency: Verdict,
    memory: Mapping[str, int],
    verdict: str,
) -> PerfRecord:
    """The table's row of a comparison."""
    return PerfRecord(
        label=label,
        check="baseline",
        stat=baseline.stat,
        measured=result.stat(baseline.stat),
        reference=baseline.latency_ms,
        change_pct=100 * latency.change,
        verdict=verdict,
        spread_pct=100 * result.spread,
        peak_memory_mb=peak_mb(memory),
    )


def _verdict_text(settled: Settled, latency: Verdict, tolerance: float, memory: bool) -> str:
    """The table's verdict of a comparison (before the torch version note)."""
    result = settled.last[0]
    if settled.decision == "over":
        if not settled.generous:
            return "REGRESSION"
        return "REGRESSION (machine busy)" if result.busy else "REGRESSION (slower host)"
    if memory:
        return "MEMORY REGRESSION"
    if settled.decision == "busy":
        return settled.not_judged
    if improved(latency, tolerance):
        return f"improved {100 * -latency.change:.0f} %"
    return "ok (machine busy)" if result.busy else "ok"


def _not_comparable(
    label: str, baseline: Baseline, threads: int, strict: bool, rerecord: str
) -> Outcome:
    why = (
        f"the baseline was recorded with {baseline.threads} thread(s), this run"
        f" measures with {threads}; timings under different thread counts are not"
        f" comparable. Measure with the same count ({THREADS}"
        f"={baseline.threads})"
        if baseline.threads != threads
        else f"the baseline records the statistic {baseline.stat!r}, which this version does"
        f" not compute. Re-record"
    )
    message = f"{label}: {why}, or re-record with: {rerecord}"
    row = PerfRecord(label, "baseline", baseline.stat, None, "not comparable", baseline.latency_ms)
    return Outcome("fail" if strict else "skip", message, row, baseline, judged=False)
