"""Judging instruction counts (``--torch-perf-measure=instructions``): recording one,
comparing one with its baseline under the same key, and saying where the extra
instructions went.

The rule is the wall clock's (``rule.judge``: ``new > baseline * (1 + tolerance) +
slack``) with the instruction tolerance and slack, and the slack grows by
``rule.INTERPRETER_ALLOWANCE`` of the instructions the Python interpreter counted in
the baseline and ``rule.ALLOCATOR_ALLOWANCE`` of those glibc's allocator counted, which
move between processes for reasons that are not the code's. A count is what is typical
of its calls (``counting.typical``), recorded and compared alike. Nothing here measures:
``count`` is handed in, so the judging is tested with recorded counts.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping

from pytest_torch.perf.engines.instructions.callgrind_output import (
    Growth,
    allocator_instructions,
    describe_function,
    grew_most,
    is_allocator,
    is_interpreter,
)
from pytest_torch.perf.engines.instructions.counting import Counted, fmt_count, parse_key
from pytest_torch.perf.engines.instructions.entry import InstructionBaseline
from pytest_torch.perf.outcome import Outcome
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import (
    ALLOCATOR_ALLOWANCE,
    INTERPRETER_ALLOWANCE,
    Verdict,
    improved,
    judge,
)

CHECK = "instructions"
#: the unit of the figures (``engine.InstructionEngine.unit``)
UNIT = "instr"
#: the functions a regression names
NAMED_FUNCTIONS = 5
_KEY_PARTS = {"torch": "torch", "python": "Python", "valgrind": "Valgrind", "cpu": "CPU kernels"}


def statistic(counted: Counted) -> str:
    return f"typical of {len(counted.repeats)}"


def new_baseline(counted: Counted) -> InstructionBaseline:
    return InstructionBaseline(
        instructions=counted.instructions,
        spread=counted.spread,
        repeats=len(counted.repeats),
        recorded=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        functions=dict(counted.functions),
        interpreter=counted.interpreter,
        allocator=counted.allocator,
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
    allocator_allowance: float = ALLOCATOR_ALLOWANCE,
) -> Outcome:
    """Count and compare with ``baseline``; a count over the limit is counted once more
    before it fails (the smaller of the two decides), and the failure names the
    functions that grew most."""
    allowed = allowed_slack(baseline, slack, interpreter_allowance, allocator_allowance)
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
    limit = limit_text(
        verdict, tolerance, slack, baseline, interpreter_allowance, allocator_allowance
    )
    lines = [
        f"instruction count regression in {label}:",
        f"  instructions per call: {fmt_count(counted.instructions)} vs baseline"
        f" {fmt_count(baseline.instructions)} = {verdict.ratio:.4f}x"
        f" ({100 * verdict.change:+.2f} %);"
        f" {limit}",
        f"  counted {len(counts)} times, {len(counted.repeats)} calls each after"
        f" {counted.warmups} warm-up call(s), each the smallest rest plus the allocator's"
        " median: " + ", ".join(fmt_count(c.instructions) for c in counts),
        *attribution(baseline.functions, counted.functions, allocator_allowance),
        f"  counted under {key}, 1 intra-op thread; baseline recorded {baseline.recorded}",
        f"  If the extra work is intended, re-record with: {rerecord}",
    ]
    return Outcome("fail", "\n".join(lines), row)


def allowed_slack(
    baseline: InstructionBaseline,
    slack: int,
    allowance: float = INTERPRETER_ALLOWANCE,
    allocator_allowance: float = ALLOCATOR_ALLOWANCE,
) -> int:
    """What the rule adds to ``baseline x (1 + tolerance)``: the slack, ``allowance`` of
    the instructions the interpreter counted in the baseline and ``allocator_allowance``
    of those glibc's allocator counted."""
    return (
        slack
        + round(allowance * baseline.interpreter)
        + round(allocator_allowance * baseline.allocator)
    )


def limit_text(
    verdict: Verdict,
    tolerance: float,
    slack: int,
    baseline: InstructionBaseline,
    allowance: float,
    allocator_allowance: float = 0.0,
) -> str:
    """``limit N = baseline x (1 + tolerance 0.01) + 5 % of its 812,000 instructions in
    the Python interpreter + 50 % of its 30,000 in glibc's allocator + slack 10,000``."""
    python = (
        f" + {100 * allowance:g} % of its {baseline.interpreter:,} instructions in the"
        " Python interpreter"
        if baseline.interpreter and allowance
        else ""
    )
    heap = (
        f" + {100 * allocator_allowance:g} % of its {baseline.allocator:,} in glibc's allocator"
        if baseline.allocator and allocator_allowance
        else ""
    )
    return (
        f"limit {fmt_count(verdict.limit)} = baseline x (1 + tolerance {tolerance:g})"
        f"{python}{heap} + slack {slack:,}"
    )


def attribution(
    before: Mapping[str, int], now: Mapping[str, int], allocator_noise: float = ALLOCATOR_ALLOWANCE
) -> list[str]:
    """The lines naming the functions whose own counts grew most; glibc's allocator's
    only for what they grew beyond ``allocator_noise`` of their baseline counts (what the
    heap's state alone moves them by), and said so when they grew within it."""
    if not before:
        return ["  (the baseline keeps no per-function counts: re-record it to see where)"]
    grown = grew_most(before, now, NAMED_FUNCTIONS, allocator_noise)
    heap_before = allocator_instructions(before)
    heap_now = allocator_instructions(now)
    heap_named = any(is_allocator(g.function) for g in grown)
    heap_within = not heap_named and 0 < heap_now - heap_before <= allocator_noise * heap_before
    if not grown:
        lines = ["  no single function grew: the extra instructions are spread thinly"]
    else:
        lines = ["  grew most (own instructions per call: baseline -> now):"]
        lines += [f"    {_growth_text(growth)}" for growth in grown]
    if any(is_interpreter(g.function) for g in grown):
        lines.append(
            "  (functions of the Python interpreter stand for Python code: the call runs"
            " more Python than before)"
        )
    if heap_named:
        lines.append(
            f"  (glibc's allocator grew beyond the {100 * allocator_noise:g} % the heap's state"
            " alone moves it by: the call allocates more, or larger, blocks than before)"
        )
    elif heap_within:
        lines.append(
            f"  (glibc's allocator counted {heap_now - heap_before:+,} in all"
            f" ({heap_before:,} -> {heap_now:,}), within the {100 * allocator_noise:g} % the"
            " heap's state alone moves it by: not named)"
        )
    return lines


def _growth_text(growth: Growth) -> str:
    before = "below the baseline's top 100" if growth.before is None else f"{growth.before:,}"
    change = f"+{growth.change:,}" if growth.before is not None else f"up to +{growth.now:,}"
    return f"{change:>14}  {describe_function(growth.function)}  ({before} -> {growth.now:,})"
