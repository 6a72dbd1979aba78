"""Outputs of one run, frozen, and what differs between two runs.

A run's output may be a tensor or any nesting of tuples, lists, dicts, named tuples,
dataclasses, ``torch.distributions`` objects (compared by their parameters: ``probs``,
``logits``, ``loc``, ``scale``...) and objects holding tensors in their attributes, with
plain values among them. :func:`freeze` turns it into ``(path, leaf)`` pairs with
tensors detached and cloned, so later runs cannot change what was recorded; leaves that
are not tensors are compared with ``==``. A leaf that cannot be compared at all (a
generator, an object whose ``==`` raises or does not answer True or False) makes
:func:`differences` raise :class:`CannotCompare`, which says where and why: a verdict
built on such a comparison would not be true.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from pytest_torch.core.pytrees import children

Leaves = list[tuple[str, Any]]

#: how deep :func:`freeze` follows containers and attributes before giving up
MAX_DEPTH = 64
_PLAIN = (type(None), bool, int, float, complex, str, bytes, type, enum.Enum, types.ModuleType)
_CALLABLES = (types.BuiltinFunctionType, types.MethodType)
_ADVICE = (
    "return tensors, values that compare with == (numbers, strings), or tuples, lists,"
    " dicts, named tuples, dataclasses or objects holding them"
)


class CannotCompare(TypeError):
    """A run's output holds a value that cannot be compared between runs."""


class Opaque(NamedTuple):
    """A leaf that cannot be compared between runs, and why; the same object in both
    runs still counts as the same."""

    type_name: str
    why: str
    value: Any = None


class _Cycle(NamedTuple):
    """An object met again inside itself: compared by where it points to."""

    to: str


class _Stateless(NamedTuple):
    """An object without ``==`` and without attributes: compared by its type."""

    type_name: str


def type_name(value: Any) -> str:
    return type(value).__qualname__


def cannot_compare(path: str, leaf: Opaque) -> CannotCompare:
    return CannotCompare(f"cannot compare {leaf.type_name} at {path}: {leaf.why}; {_ADVICE}.")


def _frozen(tensor: Any) -> Any:
    """A copy of ``tensor`` that compares element by element (dense, conj resolved)."""
    tensor = _normalised(tensor.detach())
    return tensor.clone()


def _normalised(tensor: Any) -> Any:
    import torch

    if tensor.layout != torch.strided:  # sparse COO, CSR, ...: compare the values
        tensor = tensor.to_dense()
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    return tensor


def _is_distribution(value: Any) -> bool:
    distributions = sys.modules.get("torch.distributions")
    return distributions is not None and isinstance(value, distributions.Distribution)


def _is_iterator(value: Any) -> bool:
    return hasattr(value, "__next__") and hasattr(value, "__iter__")


def _is_numpy(value: Any) -> bool:
    return type(value).__module__ == "numpy"


def _distribution_parts(value: Any) -> list[tuple[str, Any]]:
    """A distribution's parameters (``arg_constraints``: probs and logits, loc and
    scale...), then its public attributes (a base distribution, transforms)."""
    parts: list[tuple[str, Any]] = []
    try:
        names = list(value.arg_constraints)
    except Exception:  # a distribution that does not declare its parameters
        names = []
    for name in names:
        try:
            parts.append((name, getattr(value, name)))
        except Exception:  # a parameter this distribution does not provide
            continue
    covered = {name for name, _ in parts}
    for name, item in vars(value).items():
        public = name.lstrip("_")
        if public in covered or (name.startswith("_") and not _is_distribution(item)):
            continue
        parts.append((public, item))
        covered.add(public)
    return parts


def _attributes(value: Any) -> list[tuple[str, Any]] | None:
    """The attributes of a plain object (``__dict__`` and ``__slots__``), or None when
    it has neither."""
    found: list[tuple[str, Any]] = []
    has_any = False
    if hasattr(value, "__dict__"):
        has_any = True
        found += list(vars(value).items())
    for kind in type(value).__mro__:
        slots = kind.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            has_any = True
            if hasattr(value, name):
                found.append((name, getattr(value, name)))
    return found if has_any else None


def _walk(
    value: Any, path: str, copy: bool, parents: dict[int, str], depth: int = 0
) -> Iterator[tuple[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_nested:
            yield from _walk(list(value.unbind()), path, copy, parents, depth + 1)
            return
        try:
            yield path, _frozen(value) if copy else value
        except Exception as exc:  # a tensor subclass that cannot be copied
            yield path, Opaque(type_name(value), f"copying it failed ({_short(exc)})")
        return
    if isinstance(value, (*_PLAIN, *_CALLABLES, torch.dtype, torch.device, torch.layout)):
        yield path, value
        return
    if isinstance(value, types.FunctionType):  # a new closure each run: by its code
        yield path, _Stateless(f"function {value.__module__}.{value.__qualname__}")
        return
    if depth > MAX_DEPTH:
        yield path, Opaque(type_name(value), f"it is nested more than {MAX_DEPTH} levels deep")
        return
    if id(value) in parents:
        yield path, _Cycle(parents[id(value)])
        return
    parents = {**parents, id(value): path}
    depth += 1
    found = children(value)  # dataclasses, named tuples, lists, tuples, mappings
    if found is not None:
        for suffix, item in found:
            yield from _walk(item, path + suffix, copy, parents, depth)
    elif _is_distribution(value):
        for name, item in _distribution_parts(value):
            yield from _walk(item, f"{path}.{name}", copy, parents, depth)
    elif isinstance(value, torch.nn.Module):
        for name, tensor in [*value.named_parameters(), *value.named_buffers()]:
            yield from _walk(tensor, f"{path}.{name}", copy, parents, depth)
    elif _is_numpy(value) and hasattr(value, "dtype"):
        yield from _numpy(value, path, copy, parents, depth)
    elif _is_iterator(value):
        yield (
            path,
            Opaque(
                type_name(value),
                "an iterator (a generator, map, zip...) is used up when read, so its values"
                " cannot be compared without taking them from you",
                value,
            ),
        )
    else:
        yield from _object(value, path, copy, parents, depth)


def _numpy(
    value: Any, path: str, copy: bool, parents: dict[int, str], depth: int
) -> Iterator[tuple[str, Any]]:
    import torch

    if not hasattr(value, "shape") or (value.shape == () and hasattr(value, "item")):
        try:  # a NumPy scalar: its Python value
            yield from _walk(value.item(), path, copy, parents, depth)
            return
        except Exception:
            pass
    try:
        yield path, torch.tensor(value)
    except Exception as exc:  # object arrays, strings
        yield from _object(value, path, copy, parents, depth, why=f"({_short(exc)})")


def _object(
    value: Any, path: str, copy: bool, parents: dict[int, str], depth: int, why: str = ""
) -> Iterator[tuple[str, Any]]:
    """An object of another kind: by its tensors when its attributes hold any, else by
    ``==``; without ``==`` of its own, by its attributes."""
    import torch

    attributes = _attributes(value)
    parts: Leaves = []
    for name, item in attributes or []:
        parts += _walk(item, f"{path}.{name}", copy, parents, depth)
    own_eq = getattr(type(value), "__eq__", None) is not getattr(object, "__eq__", None)
    if any(isinstance(leaf, torch.Tensor) for _, leaf in parts) or (not own_eq and attributes):
        yield from parts
    elif own_eq:
        yield path, value
    elif attributes is not None:
        yield path, _Stateless(type_name(value))
    else:
        yield (
            path,
            Opaque(
                type_name(value),
                f"it has no tensors, no attributes and no == of its own {why}".rstrip(),
                value,
            ),
        )


def _short(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def freeze(value: Any, root: str = "output") -> Leaves:
    """The leaves of ``value`` with their paths; tensors detached and cloned."""
    return list(_walk(value, root, True, {}))


def tensors_in(value: Any, root: str) -> list[tuple[str, Any]]:
    """The tensors of ``value`` (not copied) with their paths, in plain containers only:
    tuples, lists, dicts, named tuples and dataclasses."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(root, value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        named = [(f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        named = [(f".{name}", getattr(value, name)) for name in value._fields]
    elif isinstance(value, (list, tuple)):
        named = [(f"[{index}]", item) for index, item in enumerate(value)]
    elif isinstance(value, Mapping):
        named = [(f"[{key!r}]", item) for key, item in value.items()]
    else:
        return []
    return [leaf for suffix, item in named for leaf in tensors_in(item, root + suffix)]


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
        if self.total == 1 and self.differing == 1 and math.isinf(self.max_abs):
            return f"{self.path}: the value differs (compared with ==)"
        largest = "NaN/Inf in one run only" if math.isinf(self.max_abs) else f"{self.max_abs:.3g}"
        return (
            f"{self.path}: {self.differing} of {self.total} elements differ"
            f" (max abs difference {largest})"
        )


def _tensor_difference(path: str, a: Any, b: Any, atol: float, rtol: float) -> Difference | None:
    import torch

    a, b = _normalised(a), _normalised(b)
    if a.shape != b.shape:
        return Difference(path, 1, 1, math.inf, "shape")
    if a.dtype != b.dtype:
        return Difference(path, 1, 1, math.inf, "dtype")
    if a.device.type == "meta" or b.device.type == "meta":
        return None  # no values to compare
    if a.device != b.device:
        b = b.to(a.device)
    if a.numel() == 0:
        return None
    total = a.numel()
    if a.is_complex():  # an element differs when its real or its imaginary part does
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.is_floating_point():
        if a.element_size() == 1:  # float8: few kernels; float32 holds every value
            a, b = a.float(), b.float()
        both_nan = a.isnan() & b.isnan()
        if atol == 0 and rtol == 0:  # bitwise: -0.0 and 0.0 differ too
            differ = ((a != b) | (a.signbit() != b.signbit())) & ~both_nan
        else:
            differ = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        count = int((differ.any(-1) if a.numel() != total else differ).sum())
        if not count:
            return None
        finite = differ & a.isfinite() & b.isfinite()
        non_finite = bool((differ & ~finite).any())
        largest = (
            float((a[finite].double() - b[finite].double()).abs().max()) if finite.any() else 0.0
        )
        return Difference(path, count, total, math.inf if non_finite else largest)
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


def _equal(path: str, a: Any, b: Any) -> bool:
    """``a == b`` as a plain truth value, or :class:`CannotCompare` saying why not."""
    try:
        result = a == b
    except Exception as exc:
        raise cannot_compare(path, Opaque(type_name(a), f"its == raised {_short(exc)}")) from None
    if isinstance(result, bool):
        return result
    if _is_numpy(result) and getattr(result, "shape", None) == ():
        return bool(result)
    raise cannot_compare(
        path,
        Opaque(type_name(a), f"its == returned {type_name(result)}, not True or False"),
    )


def _float_difference(path: str, a: float, b: float, atol: float, rtol: float) -> Difference | None:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return None
    if abs(a - b) <= atol + rtol * abs(b):
        return None
    gap = abs(a - b)
    return Difference(path, 1, 1, gap if math.isfinite(gap) else math.inf)


def differences(
    first: Leaves, other: Leaves, atol: float = 0.0, rtol: float = 0.0
) -> list[Difference]:
    """What differs between two frozen runs (bitwise when both tolerances are 0).

    Raises :class:`CannotCompare` for a leaf that cannot be compared."""
    import torch

    if [path for path, _ in first] != [path for path, _ in other]:
        return [Difference(_first_apart(first, other), 1, 1, math.inf, "structure")]
    found = []
    for (path, a), (_, b) in zip(first, other, strict=True):
        difference: Difference | None
        if isinstance(a, Opaque) or isinstance(b, Opaque):
            if isinstance(a, Opaque) and isinstance(b, Opaque) and a.value is b.value:
                continue  # the very same object in both runs
            raise cannot_compare(path, a if isinstance(a, Opaque) else b)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            difference = _tensor_difference(path, a, b, atol, rtol)
        elif type(a) is not type(b):
            difference = Difference(path, 1, 1, math.inf, "type")
        elif isinstance(a, float):
            difference = _float_difference(path, a, b, atol, rtol)
        elif isinstance(a, complex):
            difference = _float_difference(path, a.real, b.real, atol, rtol) or (
                _float_difference(path, a.imag, b.imag, atol, rtol)
            )
        else:
            difference = None if _equal(path, a, b) else Difference(path, 1, 1, math.inf)
        if difference is not None:
            found.append(difference)
    return found


def _first_apart(first: Leaves, other: Leaves) -> str:
    for (a, _), (b, _) in zip(first, other, strict=False):
        if a != b:
            return a if len(a) <= len(b) else b
    longer = first if len(first) > len(other) else other
    shorter = other if longer is first else first
    return longer[len(shorter)][0] if longer else "output"


def has_nan(leaves: Leaves) -> bool:
    """Whether any floating-point leaf holds a NaN."""
    import torch

    for _, leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.numel():
            if leaf.element_size() == 1:
                leaf = leaf.float()
            if bool(leaf.isnan().any()):
                return True
        if isinstance(leaf, float) and math.isnan(leaf):
            return True
    return False
