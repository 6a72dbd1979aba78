"""What a leak check is asked to do: the ``torch_memory_leak`` marker's settings.

Kept apart from the engine so the plugin can read options at start-up without loading it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

MARKER = "torch_memory_leak"
DEFAULT_ITERATIONS = 5


class LeakCheck(NamedTuple):
    iterations: int = DEFAULT_ITERATIONS
    #: growth per run that is allowed, in tensors and in bytes
    tolerance_tensors: int = 0
    tolerance_bytes: int = 0


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30})


def parse_bytes(value: object, where: str) -> int:
    """Bytes from ``4096``, ``"64KiB"``, ``"1.5 MB"``; ValueError naming ``where``."""
    if isinstance(value, bool):
        raise ValueError(f"{where}: expected a number of bytes, got {value!r}")
    if isinstance(value, (int, float)) and value >= 0:
        return int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{where}: expected a number of bytes >= 0 such as 4096, '64KiB' or '1MB',"
            f" got {value!r}"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_leak_check(
    args: Sequence[Any], kwargs: Mapping[str, Any], where: str, defaults: LeakCheck
) -> LeakCheck:
    """The settings of a ``torch_memory_leak`` marker; ValueError naming ``where``."""
    example = f"Example: @pytest.mark.{MARKER}(iterations=5, tolerance_bytes='64KiB')"
    prefix = f"{where}: @pytest.mark.{MARKER}"
    unknown = set(kwargs) - set(LeakCheck._fields)
    if unknown:
        raise ValueError(
            f"{prefix} got unknown keyword(s) {', '.join(sorted(unknown))}; it takes"
            f" {', '.join(f'{f}=' for f in LeakCheck._fields)}. {example}"
        )
    if len(args) > 1 or (args and "iterations" in kwargs):
        raise ValueError(f"{prefix} takes iterations once. {example}")
    iterations = args[0] if args else kwargs.get("iterations", defaults.iterations)
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 2:
        raise ValueError(
            f"{prefix} needs iterations >= 2 (runs after the warm-up that must all grow"
            f" for a leak), got {iterations!r}. {example}"
        )
    tensors = kwargs.get("tolerance_tensors", defaults.tolerance_tensors)
    if isinstance(tensors, bool) or not isinstance(tensors, int) or tensors < 0:
        raise ValueError(f"{prefix} tolerance_tensors must be an int >= 0, got {tensors!r}")
    tolerance_bytes = parse_bytes(
        kwargs.get("tolerance_bytes", defaults.tolerance_bytes), f"{prefix} tolerance_bytes"
    )
    return LeakCheck(iterations, tensors, tolerance_bytes)
