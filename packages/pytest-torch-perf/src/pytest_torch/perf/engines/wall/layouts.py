"""What sampling (``timing``) and reading the machine (``contention``) share: where on
the thread's stack a sample runs, and the percentile of sorted figures."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (as numpy's default) of sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


#: samples cycle through this many depths of the thread's stack (see :func:`at_depth`)
LAYOUTS = 8

T = TypeVar("T")


def at_depth(depth: int, block: Callable[[], T]) -> T:
    """Run ``block`` with ``depth`` more C frames under it (each level a call through
    ``map``, a few hundred bytes of stack).

    Where the thread's stack sits relative to the interpreter's data changes how fast
    Python-heavy code runs: on the machines of benchmarks/perf_busy_machine.py about one
    process in four ran a reference loop 1.8x and a small model's call 1.5x slower,
    for its whole life, depending only on its address layout (the environment's size
    moves the stack; with address randomisation off, a given size is always slow or
    always fast). Samples taken at several depths let the fastest layout show in the
    minimum, so a baseline and a later run do not differ by the luck of their layouts.
    """
    __tracebackhide__ = True
    if depth <= 0:
        return block()
    return next(map(lambda _: at_depth(depth - 1, block), (None,)))
