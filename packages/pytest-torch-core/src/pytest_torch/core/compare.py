"""Tensor comparison that says where and by how much.

``assert_close`` accepts what ``torch.testing.assert_close`` accepts (tensors, numbers,
arrays, nested sequences and mappings) and uses its rules and default tolerances. On a
mismatch it raises ``TensorMismatchError``, which carries the tensors and a message with
the mismatched count and share, the largest differences with their indices, NaN/Inf
disagreements, the path inside nested outputs and the tolerances used. Every mismatch
is also announced through the ``pytest_torch_tensor_mismatch`` hook while a pytest
session is running, so sibling plugins (heatmaps in CI) can react.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_torch.core.tables import format_table

if TYPE_CHECKING:
    import torch

#: Default (rtol, atol) per dtype, as documented for ``torch.testing.assert_close``.
_DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


@dataclass
class Mismatch:
    """One pair of tensors that differ, with the figures that describe it."""

    path: str
    actual: torch.Tensor | None
    expected: torch.Tensor | None
    #: "values" when both have the same shape and differ in values; otherwise the
    #: metadata that differs ("shape", "dtype", "device", "layout", "stride"), "type"
    #: when one side is no tensor at all, or "other".
    kind: str
    message: str
    mismatched: int = 0
    total: int = 0
    rtol: float | None = None
    atol: float | None = None
    max_abs_diff: float | None = None
    max_abs_index: tuple[int, ...] | None = None


class TensorMismatchError(AssertionError):
    """Raised by :func:`assert_close`; carries every :class:`Mismatch` it found."""

    def __init__(self, message: str, mismatches: list[Mismatch]) -> None:
        super().__init__(message)
        self.mismatches = mismatches

    def add_detail(self, text: str) -> None:
        """Append a line to the message (e.g. where a picture of the mismatch was saved)."""
        self.args = (f"{self.args[0]}\n{text}", *self.args[1:])

    @property
    def actual(self) -> torch.Tensor | None:
        """The actual tensor of the first mismatch."""
        return self.mismatches[0].actual if self.mismatches else None

    @property
    def expected(self) -> torch.Tensor | None:
        """The expected tensor of the first mismatch."""
        return self.mismatches[0].expected if self.mismatches else None


class StructureMismatchError(TensorMismatchError):
    """The nested containers differ (lengths, keys, container types)."""


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def _walk(actual: Any, expected: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    """Pairs of leaves, the way torch.testing pairs them, with a readable path."""
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            raise StructureMismatchError(
                f"Length differs at {path}: actual has {len(actual)} items, expected"
                f" {len(expected)}.",
                [],
            )
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            yield from _walk(a, e, f"{path}[{index}]")
        return
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        missing = [k for k in expected if k not in actual]
        extra = [k for k in actual if k not in expected]
        if missing or extra:
            raise StructureMismatchError(
                f"Keys differ at {path}: missing from actual {sorted(map(repr, missing))},"
                f" unexpected in actual {sorted(map(repr, extra))}.",
                [],
            )
        for key in expected:
            yield from _walk(actual[key], expected[key], f"{path}[{key!r}]")
        return
    yield path, actual, expected


def default_tolerances(*dtypes: torch.dtype) -> tuple[float, float]:
    """torch.testing's default (rtol, atol): the loosest of the given dtypes' defaults."""
    rtols, atols = [0.0], [0.0]
    for dtype in dtypes:
        rtol, atol = _DEFAULT_TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))
        rtols.append(rtol)
        atols.append(atol)
    return max(rtols), max(atols)


def _as_tensor(value: Any) -> torch.Tensor | None:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value)
    except Exception:
        return None


def _metadata_kind(actual: torch.Tensor, expected: torch.Tensor, checks: Mapping[str, bool]) -> str:
    if actual.shape != expected.shape:
        return "shape"
    if checks["check_dtype"] and actual.dtype != expected.dtype:
        return "dtype"
    if checks["check_device"] and actual.device != expected.device:
        return "device"
    if checks["check_layout"] and actual.layout != expected.layout:
        return "layout"
    if checks["check_stride"] and actual.stride() != expected.stride():
        return "stride"
    return "values"


def _index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return tuple(reversed(index))


def _fmt_index(index: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(i) for i in index) + ("," if len(index) == 1 else "") + ")"


def _fmt_value(value: Any) -> str:
    if isinstance(value, complex):
        return f"{value.real:.6g}{value.imag:+.6g}j"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}"


def _dense_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """A plain strided CPU copy to compute figures on (sparse and quantized included)."""
    import torch

    tensor = tensor.detach()
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    return tensor.to("cpu")


def _closeness(
    a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float, equal_nan: bool
) -> tuple[torch.Tensor, torch.Tensor, bool, torch.Tensor, torch.Tensor]:
    """Both tensors in a common working dtype, whether it is exact (integers, bools),
    which elements are close and the absolute differences (real, for complex)."""
    import torch

    common = torch.promote_types(a.dtype, e.dtype)
    exact = not (common.is_floating_point or common.is_complex)
    if exact:
        work = torch.float64 if (rtol or atol) else torch.int64
    else:
        work = torch.complex128 if common.is_complex else torch.float64
    a_w, e_w = a.to(work), e.to(work)
    if work is torch.int64:
        close = a_w == e_w
        diff = (a_w - e_w).abs().to(torch.float64)
    else:
        close = torch.isclose(a_w, e_w, rtol=rtol, atol=atol, equal_nan=equal_nan)
        diff = (a_w - e_w).abs()
        diff = diff.real if diff.is_complex() else diff
    return a_w, e_w, exact, close, diff


def _finite_lines(
    a: torch.Tensor,
    e: torch.Tensor,
    diff: torch.Tensor,
    rel: torch.Tensor,
    finite_mismatch: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    max_report: int,
) -> tuple[list[str], float, tuple[int, ...]]:
    """The greatest differences among finite mismatches, and the largest ones as a table;
    with the greatest absolute difference and its index."""
    import torch

    shape = tuple(a.shape)
    masked = torch.where(finite_mismatch, diff, torch.full_like(diff, -1.0)).reshape(-1)
    k = min(max_report, int(finite_mismatch.sum()))
    values, flat = torch.topk(masked, k)
    max_abs = float(values[0])
    max_index = _index(int(flat[0]), shape)
    masked_rel = torch.where(finite_mismatch, rel, torch.full_like(rel, -1.0)).reshape(-1)
    rel_flat = int(torch.argmax(masked_rel))
    lines = [
        f"  greatest absolute difference: {max_abs:.4g} at index {_fmt_index(max_index)}"
        f" (allowed: atol {atol:.3g} + rtol {rtol:.3g} x |expected|)",
        f"  greatest relative difference: {float(masked_rel[rel_flat]):.4g} at index"
        f" {_fmt_index(_index(rel_flat, shape))}",
    ]
    finite_count = int(finite_mismatch.sum())
    lines.append(f"  largest differences ({k} of {finite_count} finite mismatches):")
    rows: list[tuple[str, ...]] = [("index", "actual", "expected", "abs diff", "rel diff")]
    flat_a, flat_e, flat_rel = a.reshape(-1), e.reshape(-1), rel.reshape(-1)
    for value, position in zip(values.tolist(), flat.tolist(), strict=True):
        rows.append(
            (
                _fmt_index(_index(position, shape)),
                _fmt_value(flat_a[position].item()),
                _fmt_value(flat_e[position].item()),
                f"{value:.4g}",
                f"{float(flat_rel[position]):.4g}",
            )
        )
    return lines + format_table(rows, indent="    "), max_abs, max_index


def _nonfinite_lines(
    a: torch.Tensor, e: torch.Tensor, nonfinite_mismatch: torch.Tensor, max_report: int
) -> list[str]:
    """The NaN/Inf disagreements, as a table."""
    import torch

    shape = tuple(a.shape)
    nonfinite = int(nonfinite_mismatch.sum())
    positions = torch.nonzero(nonfinite_mismatch.reshape(-1)).reshape(-1)[:max_report]
    lines = [f"  NaN/Inf disagreements ({nonfinite}):"]
    nan_rows: list[tuple[str, ...]] = [("index", "actual", "expected")]
    flat_a, flat_e = a.reshape(-1), e.reshape(-1)
    for position in positions.tolist():
        nan_rows.append(
            (
                _fmt_index(_index(position, shape)),
                _fmt_value(flat_a[position].item()),
                _fmt_value(flat_e[position].item()),
            )
        )
    return lines + format_table(nan_rows, indent="    ")


def _value_details(
    path: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float | None,
    atol: float | None,
    equal_nan: bool,
    max_report: int,
) -> Mismatch | None:
    """Compare values of two same-shape tensors; None when they are close."""
    import torch

    a, e = _dense_cpu(actual), _dense_cpu(expected)
    if rtol is None or atol is None:
        default_rtol, default_atol = default_tolerances(a.dtype, e.dtype)
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
    a_w, e_w, exact, close, diff = _closeness(a, e, rtol, atol, equal_nan)
    mismatch = ~close
    count = int(mismatch.sum())
    if count == 0:
        return None
    total = a.numel()
    shape = tuple(a.shape)
    finite = torch.isfinite(a_w) & torch.isfinite(e_w) if not exact else torch.ones_like(close)
    finite_mismatch = mismatch & finite
    nonfinite_mismatch = mismatch & ~finite
    denom = e_w.abs().to(torch.float64)
    infinite = torch.full_like(diff, float("inf"))
    rel = torch.where(denom > 0, diff / denom.clamp_min(1e-300), infinite)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)

    lines = [
        f"Tensors are not close at {path}",
        f"  shape {tuple(shape)}, dtype {actual.dtype}"
        + (f" vs {expected.dtype}" if expected.dtype != actual.dtype else "")
        + f", device {actual.device}",
        f"  mismatched elements: {count} of {total} ({100.0 * count / max(total, 1):.3g}%)",
    ]
    max_abs: float | None = None
    max_index: tuple[int, ...] | None = None
    if bool(finite_mismatch.any()):
        finite_lines, max_abs, max_index = _finite_lines(
            a, e, diff, rel, finite_mismatch, rtol=rtol, atol=atol, max_report=max_report
        )
        lines += finite_lines
    if int(nonfinite_mismatch.sum()):
        lines += _nonfinite_lines(a, e, nonfinite_mismatch, max_report)
        if not equal_nan and bool((torch.isnan(a_w) & torch.isnan(e_w)).any()):
            lines.append("  (NaN in both counts as a mismatch; pass equal_nan=True to accept it)")
    lines.append(f"  tolerances: rtol={rtol:.3g}, atol={atol:.3g}")
    return Mismatch(
        path=path,
        actual=actual,
        expected=expected,
        kind="values",
        message="\n".join(lines),
        mismatched=count,
        total=total,
        rtol=rtol,
        atol=atol,
        max_abs_diff=max_abs,
        max_abs_index=max_index,
    )


def _compare_leaf(
    path: str, actual: Any, expected: Any, kwargs: dict[str, Any], max_report: int
) -> Mismatch | None:
    import torch

    try:
        torch.testing.assert_close(actual, expected, **kwargs)
        return None
    except AssertionError as exc:
        torch_message = str(exc).strip()
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a is None or e is None:
        return Mismatch(path, None, None, "type", f"Mismatch at {path}: {torch_message}")
    kind = _metadata_kind(a, e, kwargs)
    if kind == "values":
        details = _value_details(
            path,
            a,
            e,
            rtol=kwargs["rtol"],
            atol=kwargs["atol"],
            equal_nan=kwargs["equal_nan"],
            max_report=max_report,
        )
        if details is not None:
            return details
        kind = "other"
    return Mismatch(path, a, e, kind, f"Mismatch at {path} ({kind}): {torch_message}")


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    allow_subclasses: bool = True,
    msg: str | None = None,
    max_report: int = 5,
) -> None:
    """Assert that ``actual`` and ``expected`` are close, explaining any difference.

    Same inputs, rules and default tolerances as ``torch.testing.assert_close``; give
    both ``rtol`` and ``atol`` or neither. Every leaf is checked, so a nested output
    reports all of its mismatching tensors at once. ``max_report`` bounds how many of
    the largest differences are listed per tensor. ``msg`` is put in front of the
    details.

    Raises:
        TensorMismatchError: with ``.mismatches`` (each with the tensors involved).
    """
    __tracebackhide__ = True
    if (rtol is None) != (atol is None):
        raise ValueError(
            f"assert_close needs both rtol and atol or neither; got rtol={rtol!r},"
            f" atol={atol!r}. Pass both to override torch's defaults for the dtype."
        )
    kwargs: dict[str, Any] = dict(
        rtol=rtol,
        atol=atol,
        equal_nan=equal_nan,
        check_device=check_device,
        check_dtype=check_dtype,
        check_layout=check_layout,
        check_stride=check_stride,
        allow_subclasses=allow_subclasses,
    )
    try:
        pairs = list(_walk(actual, expected, "output"))
    except StructureMismatchError as exc:
        _announce(exc)
        raise
    mismatches = [
        m
        for m in (_compare_leaf(path, a, e, kwargs, max_report) for path, a, e in pairs)
        if m is not None
    ]
    if not mismatches:
        return
    parts = [msg] if msg else []
    if len(pairs) > 1:
        parts.append(f"{len(mismatches)} of {len(pairs)} compared tensors differ.")
    parts += [m.message for m in mismatches]
    if any(m.kind == "values" and m.max_abs_diff is not None for m in mismatches):
        parts.append(
            "If a difference of this size is expected (lower precision, another kernel"
            " or device), pass looser rtol= and atol=; otherwise the values really differ."
        )
    elif any(m.kind == "values" for m in mismatches):
        parts.append(
            "Only NaN/Inf values disagree: look for an overflow, a division by zero or a"
            " log/sqrt of a non-positive number on the way to the actual value."
        )
    error = TensorMismatchError("\n".join(parts), mismatches)
    _announce(error)
    raise error


def _announce(error: TensorMismatchError) -> None:
    # pytest: session imports it, which assert_close outside a pytest run never pays for
    from pytest_torch.core import session

    session.announce_mismatch(error)
