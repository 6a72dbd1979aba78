"""Outputs of one run, frozen, and what differs between two runs.

A run's output may be a tensor or any nesting of tuples, lists, dicts, named tuples and
dataclasses of tensors and plain values; :func:`freeze` turns it into ``(path, leaf)``
pairs with tensors detached and cloned, so later runs cannot change what was recorded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

Leaves = list[tuple[str, Any]]


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        yield path, value.detach().clone()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _walk(getattr(value, item.name), f"{path}.{item.name}")
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        for name in value._fields:
            yield from _walk(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _walk(item, f"{path}[{key!r}]")
    else:
        yield path, value


def freeze(value: Any, root: str = "output") -> Leaves:
    """The leaves of ``value`` with their paths; tensors detached and cloned."""
    return list(_walk(value, root))


class Difference(NamedTuple):
    """How one leaf differs between two runs."""

    path: str
    #: elements that differ, and of how many (1 of 1 for a plain value)
    differing: int
    total: int
    #: largest absolute difference among finite values (inf when NaN/Inf differ)
    max_abs: float
    #: what differs when it is not the values: "shape", "dtype", "type", "structure"
    kind: str = "values"

    def describe(self) -> str:
        if self.kind != "values":
            return f"{self.path}: the {self.kind} differs"
        largest = "NaN/Inf in one run only" if math.isinf(self.max_abs) else f"{self.max_abs:.3g}"
        return (
            f"{self.path}: {self.differing} of {self.total} elements differ"
            f" (max abs difference {largest})"
        )


def _tensor_difference(path: str, a: Any, b: Any, atol: float, rtol: float) -> Difference | None:
    import torch

    if a.shape != b.shape:
        return Difference(path, 1, 1, math.inf, "shape")
    if a.dtype != b.dtype:
        return Difference(path, 1, 1, math.inf, "dtype")
    if a.device != b.device:
        b = b.to(a.device)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.is_floating_point():
        both_nan = a.isnan() & b.isnan()
        if atol == 0 and rtol == 0:  # bitwise: -0.0 and 0.0 differ too
            differ = ((a != b) | (a.signbit() != b.signbit())) & ~both_nan
        else:
            differ = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        count = int(differ.sum())
        if not count:
            return None
        finite = differ & a.isfinite() & b.isfinite()
        non_finite = bool((differ & ~finite).any())
        largest = (
            float((a[finite].double() - b[finite].double()).abs().max()) if finite.any() else 0.0
        )
        return Difference(path, count, a.numel(), math.inf if non_finite else largest)
    differ = a != b
    count = int(differ.sum())
    if not count:
        return None
    largest = (
        float((a[differ].double() - b[differ].double()).abs().max())
        if a.dtype != torch.bool
        else 1.0
    )
    return Difference(path, count, a.numel(), largest)


def differences(
    first: Leaves, other: Leaves, atol: float = 0.0, rtol: float = 0.0
) -> list[Difference]:
    """What differs between two frozen runs (bitwise when both tolerances are 0)."""
    import torch

    if [path for path, _ in first] != [path for path, _ in other]:
        return [Difference(first[0][0] if first else "output", 1, 1, math.inf, "structure")]
    found = []
    for (path, a), (_, b) in zip(first, other, strict=True):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            difference = _tensor_difference(path, a, b, atol, rtol)
        elif type(a) is not type(b):
            difference = Difference(path, 1, 1, math.inf, "type")
        elif isinstance(a, float) and isinstance(b, float):
            same = a == b or (math.isnan(a) and math.isnan(b))
            close = same or abs(a - b) <= atol + rtol * abs(b)
            difference = None if close else Difference(path, 1, 1, abs(a - b))
        else:
            difference = None if a == b else Difference(path, 1, 1, math.inf)
        if difference is not None:
            found.append(difference)
    return found


def has_nan(leaves: Leaves) -> bool:
    """Whether any floating-point leaf holds a NaN."""
    import torch

    for _, leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and bool(leaf.isnan().any()):
            return True
        if isinstance(leaf, float) and math.isnan(leaf):
            return True
    return False
