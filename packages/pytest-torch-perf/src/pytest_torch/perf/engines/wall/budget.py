"""Latency budgets (``@pytest.mark.torch_max_latency``, ``checks.latency_budget``):
judging measurements against the budget, settled in proportion to the interference
(``settling``). Works on measurements handed in: testable with made-up numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from pytest_torch.perf.engines.wall.settling import (
    NOT_JUDGED,
    Settled,
    busy_advice,
    counted,
    disturbance,
    generous_reading,
    machine_line,
    settle,
)
from pytest_torch.perf.engines.wall.timing import LatencyResult, fmt_ms
from pytest_torch.perf.options import THREADS
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord


@dataclass(frozen=True)
class Budget:
    ms: float
    stat: str = "median"


def finite_number(value: object) -> TypeGuard[float]:
    """A real number, not a bool, NaN or an infinity (a budget that can never fail)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def budget_record(label: str, result: LatencyResult, budget: Budget, verdict: str) -> PerfRecord:
    measured = result.stat(budget.stat)
    return PerfRecord(
        label=label,
        check="budget",
        stat=budget.stat,
        measured=measured,
        reference=budget.ms,
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
        f" check the device and the thread count ({THREADS}); make the"
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
