"""Judging instruction counts (``--torch-perf-measure=instructions``): recording one,
comparing one with its baseline under the same key, and saying where the extra
instructions went.

The rule is the wall clock's (``rule.judge``: ``new > baseline * (1 + tolerance) +
slack``) with the instruction tolerance and slack, and the slack grows by
``rule.INTERPRETER_ALLOWANCE`` of the instructions the Python interpreter counted in
the baseline, which move between processes for reasons that are not the code's. Nothing
here measures: ``count`` is handed in, so the judging is tested with recorded counts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping

from pytest_torch.perf.engines.instructions.callgrind_output import (
    Growth,
    describe_function,
    grew_most,
)
from pytest_torch.perf.engines.instructions.counting import Counted, fmt_count, parse_key
from pytest_torch.perf.engines.instructions.entry import InstructionBaseline
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import INTERPRETER_ALLOWANCE, Verdict, improved, judge

CHECK = "instructions"
#: the unit of the figures (``engine.InstructionEngine.unit``)
UNIT = "instr"
#: the functions a regression names
NAMED_FUNCTIONS = 5
_KEY_PARTS = {"torch": "torch", "python": "Python", "valgrind": "Valgrind", "cpu": "CPU kernels"}


def statistic(counted: Counted) -> str:
    return f"min of {len(counted.repeats)}"


def new_baseline(counted: Counted) -> InstructionBaseline:
    return InstructionBaseline(
        instructions=counted.instructions,
        spread=counted.spread,
        repeats=len(counted.repeats),
        recorded=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        functions=dict(counted.functions),
        interpreter=counted.interpreter,
    )


def record(label: str, counted: Counted, key: str) -> tuple[Outcome, InstructionBaseline]:
    """The outcome of recording ``counted`` for ``label`` under ``key``."""
    baseline = new_baseline(counted)
    row = PerfRecord(
        label=label,
        check=CHECK,
        stat=statistic(counted),
        measured=counted.instructions,
        verdict="recorded",
        spread_pct=100 * counted.spread,
        unit=UNIT,
    )
    message = f"recorded {label}: {fmt_count(counted.instructions)} per call under {key}"
    return Outcome("pass", message, row), baseline


def missing(label: str, key: str, recorded: Mapping[str, InstructionBaseline], strict: bool,
            rerecord: str) -> Outcome:  # fmt: skip
    """No count under this run's key: none at all, or only under other keys (then say
    what differs from the closest one)."""
    if not recorded:
        verdict = "no baseline"
        message = (
            f"no instruction count recorded for {label} under {key}. Record one with: {rerecord}"
        )
    else:
        verdict = "not comparable"
        now = parse_key(key)
        closest = min(recorded, key=lambda other: len(_differences(parse_key(other), now)))
        differs = "; ".join(_differences(parse_key(closest), now))
        message = (
            f"{label}: not comparable: its instruction count was recorded with {differs}."
            f" Counts depend on the torch, Python and Valgrind versions and on the CPU"
            f" kernels torch picks, so only a count under the same key is compared. Run"
            f" where these match, or re-record here with: {rerecord}"
        )
    row = PerfRecord(label, CHECK, "-", None, verdict, unit=UNIT)
    return Outcome("fail" if strict else "skip", message, row, judged=False)


def _differences(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    return [
        f"{name} {recorded.get(part, '?')} (this run: {now.get(part, '?')})"
        for part, name in _KEY_PARTS.items()
        if recorded.get(part) != now.get(part)
    ]


def compare(
    label: str,
    baseline: InstructionBaseline,
    count: Callable[[], Counted],
    *,
    key: str,
    tolerance: float,
    slack: int,
    rerecord: str,
    interpreter_allowance: float = INTERPRETER_ALLOWANCE,
) -> Outcome:
    """Count and compare with ``baseline``; a count over the limit is counted once more
    before it fails (the smaller of the two decides), and the failure names the
    functions that grew most."""
    allowed = allowed_slack(baseline, slack, interpreter_allowance)
    counted = count()
    verdict = judge(counted.instructions, baseline.instructions, tolerance, allowed)
    counts = [counted]
    if verdict.regressed:
        counts.append(count())
        counted = min(counts, key=lambda c: c.instructions)
        verdict = judge(counted.instructions, baseline.instructions, tolerance, allowed)
    if verdict.regressed:
        text = "REGRESSION"
    elif improved(verdict, tolerance):
        text = f"improved {100 * -verdict.change:.1f} %"
    else:
        text = "ok"
    row = PerfRecord(
        label=label,
        check=CHECK,
        stat=statistic(counted),
        measured=counted.instructions,
        verdict=text,
        reference=baseline.instructions,
        change_pct=100 * verdict.change,
        spread_pct=100 * counted.spread,
        unit=UNIT,
    )
    if not verdict.regressed:
        message = f"{label}: {text} ({100 * verdict.change:+.2f} % instructions)"
        if text.startswith("improved"):
            message += f"; consider re-recording with: {rerecord}"
        return Outcome("pass", message, row)
    lines = [
        f"instruction count regression in {label}:",
        f"  instructions per call: {fmt_count(counted.instructions)} vs baseline"
        f" {fmt_count(baseline.instructions)} = {verdict.ratio:.4f}x"
        f" ({100 * verdict.change:+.2f} %);"
        f" {limit_text(verdict, tolerance, slack, baseline.interpreter, interpreter_allowance)}",
        f"  counted {len(counts)} times, {len(counted.repeats)} calls each after"
        f" {counted.warmups} warm-up call(s), the smallest kept: "
        + ", ".join(fmt_count(c.instructions) for c in counts),
        *attribution(baseline.functions, counted.functions),
        f"  counted under {key}, 1 intra-op thread; baseline recorded {baseline.recorded}",
        f"  If the extra work is intended, re-record with: {rerecord}",
    ]
    return Outcome("fail", "\n".join(lines), row)


def allowed_slack(
    baseline: InstructionBaseline, slack: int, allowance: float = INTERPRETER_ALLOWANCE
) -> int:
    """What the rule adds to ``baseline x (1 + tolerance)``: the slack, and ``allowance``
    of the instructions the interpreter counted in the baseline."""
    return slack + round(allowance * baseline.interpreter)


def limit_text(
    verdict: Verdict, tolerance: float, slack: int, interpreter: int, allowance: float
) -> str:
    """``limit N = baseline x (1 + tolerance 0.01) + 5 % of its 812,000 instructions in
    the Python interpreter + slack 10,000``."""
    python = (
        f" + {100 * allowance:g} % of its {interpreter:,} instructions in the Python interpreter"
        if interpreter and allowance
        else ""
    )
    return (
        f"limit {fmt_count(verdict.limit)} = baseline x (1 + tolerance {tolerance:g})"
        f"{python} + slack {slack:,}"
    )


def attribution(before: Mapping[str, int], now: Mapping[str, int]) -> list[str]:
    """The lines naming the functions whose own counts grew most."""
    if not before:
        return ["  (the baseline keeps no per-function counts: re-record it to see where)"]
    grown = grew_most(before, now, NAMED_FUNCTIONS)
    if not grown:
        return ["  no single function grew: the extra instructions are spread thinly"]
    lines = ["  grew most (own instructions per call: baseline -> now):"]
    lines += [f"    {_growth_text(growth)}" for growth in grown]
    if any("[Python interpreter" in describe_function(g.function) for g in grown):
        lines.append(
            "  (functions of the Python interpreter stand for Python code: the call runs"
            " more Python than before)"
        )
    return lines


def _growth_text(growth: Growth) -> str:
    before = "below the baseline's top 100" if growth.before is None else f"{growth.before:,}"
    change = f"+{growth.change:,}" if growth.before is not None else f"up to +{growth.now:,}"
    return f"{change:>14}  {describe_function(growth.function)}  ({before} -> {growth.now:,})"
