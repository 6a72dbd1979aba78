"""The regression rule: when a new figure is a regression against its baseline.

A regression is ``new > baseline * (1 + tolerance) + slack``; faster (or smaller) is
never one, and a figure faster than ``baseline * (1 - tolerance)`` has "improved". The
default tolerances, their validation and the text that shows a limit live here too, so
every check (``perf_baseline``, benchmark suites) applies the same rule.

Plain Python, no torch: cheap to import from the decorator of a test module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_torch.core.units import MIB

#: How much slower than its baseline a latency may be before it is a regression
#: (``perf_baseline``'s and ``@benchmark_suite``'s ``latency_tolerance``).
DEFAULT_LATENCY_TOLERANCE = 0.3
#: How much larger than its baseline a peak memory may be (``memory_tolerance``).
DEFAULT_MEMORY_TOLERANCE = 0.1
#: Peak-memory growth below this is never a regression (allocator rounding).
MEMORY_SLACK_BYTES = MIB
#: How many more instructions than its baseline a call may count
#: (``--torch-perf-measure=instructions``): a call that is mostly kernels counts within
#: 0.05 % of itself from one process to the next, serial, under xdist or shuffled
#: (``benchmarks/instruction_counts.py``); Python's part moves more (below).
DEFAULT_INSTRUCTION_TOLERANCE = 0.01
#: Instructions added to that limit. A call that is mostly Python and dispatch counts
#: differently after different earlier tests in its process (the interpreter adapts
#: its bytecode to what ran; dictionaries and the allocator hold other states): the
#: example regressor's 324,000-instruction call counted 5,400 more (1.7 %) when run
#: alone than after the rest of its file, the same each time. A large call moves by
#: the same few thousand, which is nothing to it.
DEFAULT_INSTRUCTION_SLACK = 10_000
#: Of the instructions the Python interpreter's own functions counted in the baseline,
#: this much more is allowed on top. Their count depends on the process, not only on
#: the code: the interpreter's attribute cache places an entry by the address of the
#: attribute's name, so two names of one class that landed 32 KiB apart evict each
#: other on every lookup, and where names land depends on everything the process did
#: before (serial or under xdist, which tests ran first). A small model's call counted
#: up to 4 % more of them in an xdist worker than in a serial session (2 % of its whole
#: count, well over the tolerance); kernels' instructions do not move like that
#: (``benchmarks/instruction_counts.py`` measures both).
INTERPRETER_ALLOWANCE = 0.05
#: Of the instructions glibc's allocator's functions (``malloc``, ``_int_malloc``,
#: ``unlink_chunk``, ...) counted in the baseline, this much more is allowed on top. What
#: one allocation costs depends on the chunks the heap's free lists hold, so on
#: everything the process allocated before: between sessions the allocator's part (the
#: median of the calls') moved up to 4.3 % in 100 steps of a small MLP (a fifth of its
#: count: every tensor is a malloc) and 5.4 % in a tokenizer's windows. 10 % left no
#: false failure either, but caught a 1.05x regression of the steps in 29 of 56 session
#: pairs against 49 with 5 % (``benchmarks/instruction_counts.py``). A regression names
#: an allocator function only for what it grew beyond this much of the allocator's part
#: (``callgrind_output.grew_most``).
ALLOCATOR_ALLOWANCE = 0.05

#: What a tolerance means, for the messages that reject one: "(0.3 allows 30 % more
#: than the baseline)".
TOLERANCE_HINT = (
    f"({DEFAULT_LATENCY_TOLERANCE:g} allows {100 * DEFAULT_LATENCY_TOLERANCE:.0f} % more"
    f" than the baseline)"
)


def valid_tolerance(value: object) -> bool:
    """A tolerance is a real number (not a bool), finite and >= 0."""
    return (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value >= 0
    )


def tolerance_problem(name: str, value: object) -> str | None:
    """What is wrong with the tolerance ``name`` = ``value``, or None when it is valid."""
    if valid_tolerance(value):
        return None
    return f"{name} must be a finite number >= 0, got {value!r}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing one figure with its baseline."""

    regressed: bool
    limit: float
    ratio: float

    @property
    def change(self) -> float:
        """Relative change: +0.42 is 42 % slower (or larger)."""
        return self.ratio - 1.0


def judge(new: float, baseline: float, tolerance: float, slack: float) -> Verdict:
    """The rule: a regression is ``new > baseline * (1 + tolerance) + slack``.

    Faster (or smaller) is never a regression.
    """
    limit = baseline * (1 + tolerance) + slack
    ratio = new / baseline if baseline > 0 else (1.0 if new == 0 else float("inf"))
    return Verdict(regressed=new > limit, limit=limit, ratio=ratio)


def improved(verdict: Verdict, tolerance: float) -> bool:
    """Faster than the baseline by more than the tolerance: worth re-recording."""
    return verdict.change < -tolerance


def latency_limit_text(verdict: Verdict, tolerance: float, slack_ms: float) -> str:
    """``limit 1.4 ms = baseline x (1 + tolerance 0.3) + slack 0.1 ms``."""
    # not at the top: test modules import the rule with @benchmark_suite, cheaply
    from pytest_torch.perf.engines.wall.timing import fmt_ms

    return (
        f"limit {fmt_ms(verdict.limit)} = baseline x (1 + tolerance {tolerance:g})"
        f" + slack {fmt_ms(slack_ms)}"
    )


def memory_limit_text(verdict: Verdict, tolerance: float) -> str:
    """``limit 110.0 MiB = baseline x (1 + 0.1) + 1 MiB`` (slack: MEMORY_SLACK_BYTES)."""
    return (
        f"limit {verdict.limit / MIB:.1f} MiB = baseline x (1 + {tolerance:g})"
        f" + {MEMORY_SLACK_BYTES / MIB:g} MiB"
    )
