"""What a leak check is asked to do: the ``torch_memory_leak`` marker's parameters.

Kept apart from the engine so the plugin can read options at start-up without loading it.
"""

from __future__ import annotations

import math
import numbers
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, cast

from pytest_torch.core.units import GIB, KIB, MIB
from pytest_torch.memory.markers import LEAK

MARKER = LEAK.name
DEFAULT_ITERATIONS = 5


class LeakCheck(NamedTuple):
    iterations: int = DEFAULT_ITERATIONS
    #: growth per run that is allowed, in tensors and in bytes
    tolerance_tensors: int = 0
    tolerance_bytes: int = 0


#: more runs than this would take hours on a real step, and tell no more
MAX_ITERATIONS = 1000
#: a tolerance above this (8 EiB) is not a size any device has
MAX_BYTES = 2**63 - 1


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError for callers of the functions, and a
    ValueError like every other bad argument for the marker and option checks."""


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_UNITS.update({"kib": KIB, "mib": MIB, "gib": GIB})


def parse_bytes(value: object, where: str) -> int:
    """Bytes from ``4096``, ``"64KiB"``, ``"1.5 MB"``; ValueError naming ``where``
    (ArgumentTypeError, also a TypeError, for a bool or a value of another type)."""
    expected = "a number of bytes >= 0 such as 4096, '64KiB' or '1MB'"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ArgumentTypeError(f"{where}: expected {expected}, got {value!r}")
    if not isinstance(value, str):
        size = float(value)
        if not math.isfinite(size) or size < 0 or size > MAX_BYTES:
            raise ValueError(f"{where}: expected {expected} (finite, at most 8 EiB), got {value!r}")
        return int(size)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{where}: expected {expected}, got {value!r}")
    number = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(number) or number > MAX_BYTES:
        raise ValueError(f"{where}: expected {expected} (at most 8 EiB), got {value!r}")
    return int(number)


def check_count(
    value: object, where: str, minimum: int, maximum: int | None, meaning: str, example: str = ""
) -> int:
    """A whole number in ``[minimum, maximum]``: ArgumentTypeError for a bool, a float or
    anything else that is not an int, ValueError for one out of range (NaN and infinities
    are floats, so they fail as the wrong type, with a message saying so)."""
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    expected = f"a whole number {bounds} ({meaning})"
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        hint = ""
        if isinstance(value, float) and not math.isfinite(value):
            hint = " (NaN and infinities are not counts)"
        elif isinstance(value, bool):
            hint = " (a bool is not a count)"
        raise ArgumentTypeError(f"{where}: expected {expected}, got {value!r}{hint}.{example}")
    number = operator.index(cast(Any, value))
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"{where}: expected {expected}, got {value!r}.{example}")
    return number


def parse_leak_check(
    args: Sequence[Any], kwargs: Mapping[str, Any], where: str, defaults: LeakCheck
) -> LeakCheck:
    """The settings of a ``torch_memory_leak`` marker; ValueError naming ``where``."""
    return leak_check_from(args, kwargs, f"{where}: @pytest.mark.{MARKER}", defaults, marker=True)


def leak_check_from(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    prefix: str,
    defaults: LeakCheck,
    marker: bool,
) -> LeakCheck:
    """The settings given to a marker (``marker=True``) or to ``assert_no_memory_leak``;
    errors start with ``prefix``."""
    shown = (
        LEAK.example
        if marker
        else "assert_no_memory_leak(step, iterations=5, tolerance_bytes='64KiB')"
    )
    example = f" Example: {shown}"
    bound = LEAK.bind(args, kwargs, prefix, defaults=defaults._asdict(), example=shown)
    iterations = check_count(
        bound["iterations"],
        f"{prefix} iterations",
        2,
        MAX_ITERATIONS,
        "runs after the warm-up that must all grow for a leak",
        example,
    )
    tensors = check_count(
        bound["tolerance_tensors"],
        f"{prefix} tolerance_tensors",
        0,
        None,
        "live tensors a run may add",
        example,
    )
    try:
        tolerance_bytes = parse_bytes(bound["tolerance_bytes"], f"{prefix} tolerance_bytes")
    except ValueError as exc:
        raise type(exc)(f"{exc}.{example}") from None
    return LeakCheck(iterations, tensors, tolerance_bytes)
