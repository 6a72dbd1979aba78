"""Pictures of tensor mismatches: actual, expected and |difference| side by side.

Every tensor is first made plottable (:func:`plottable`): sparse layouts (COO, CSR,
CSC, BSR, BSC) are densified up to :data:`MAX_ELEMENTS` elements, quantized tensors
dequantized, the components of two nested tensors of the same structure flattened one
after another, conjugate and negative views resolved; meta and empty tensors, tensors of
different shapes and larger ones raise :class:`NoPicture` with the reason, and so does a
single value (0-d or one element), its reason carrying both values.

Any shape becomes 2-D panels: 1-D data is folded into a near-square
grid, N-D data is shown as its leading slices (the ones with the most mismatches
first). Large panels are reduced with a max-pool of |difference| (and of the mismatch
mask), so a single wrong element stays visible. NaN/Inf are drawn in their own colour;
complex values are shown by magnitude with the magnitude of the complex difference,
booleans as 0/1 with the difference panel as the mismatch map, integers as numbers.
Drawing uses matplotlib's object API on the Agg canvas: no pyplot, no global backend
change, and matplotlib is imported only here.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core.files import replacing

if TYPE_CHECKING:
    import torch

#: panels larger than this (per side) are max-pooled down
MAX_SIDE = 128
#: leading slices of N-D data shown, worst first
MAX_SLICES = 4
#: larger tensors are saved but not drawn (or densified): the copies would not fit
MAX_ELEMENTS = 2**25
NON_FINITE_COLOUR = "#ff00ff"
PAD_COLOUR = "#d9d9d9"


class NoPicture(ValueError):
    """The pair cannot be drawn; the message says why (the tensors are still saved)."""


def layout_name(tensor: torch.Tensor) -> str:
    """``sparse_coo``, ``sparse_csr``, ``nested``, ``quantized``, ``meta`` or ``strided``."""
    if tensor.is_nested:
        return "nested"
    if tensor.is_quantized:
        return "quantized"
    if tensor.device.type == "meta":
        return "meta"
    return str(tensor.layout).removeprefix("torch.")


def _a_or_an(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _plain(tensor: torch.Tensor, notes: list[str]) -> torch.Tensor:
    """A strided CPU tensor with the values of ``tensor``; NoPicture when there is none."""
    import torch

    kind = layout_name(tensor)
    if kind == "meta":
        raise NoPicture("no heatmap for a meta tensor (it has a shape but no values)")
    tensor = tensor.detach()
    if tensor.numel() > MAX_ELEMENTS:
        raise NoPicture(
            f"no heatmap for {_a_or_an(kind)} tensor of {tensor.numel():,} elements (more than"
            f" {MAX_ELEMENTS:,} to draw)"
        )
    if kind == "quantized":
        tensor = tensor.dequantize()
        notes.append("quantized: dequantized values shown")
    elif tensor.layout != torch.strided:
        tensor = tensor.to_dense()
        notes.append(f"{kind}: densified")
    return tensor.cpu().resolve_conj().resolve_neg()


def plottable(
    actual: torch.Tensor, expected: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Strided CPU versions of both tensors, and notes on what was done to them."""
    import torch

    notes: list[str] = []
    if actual.is_nested or expected.is_nested:
        if not (actual.is_nested and expected.is_nested):
            raise NoPicture("no heatmap: a nested tensor is compared with a plain one")
        parts = [list(t.detach().unbind()) for t in (actual, expected)]
        if [p.shape for p in parts[0]] != [p.shape for p in parts[1]]:
            raise NoPicture("no heatmap: the components of the nested tensors differ in shape")
        a, e = (torch.cat([_plain(p, []).reshape(-1) for p in side]) for side in parts)
        notes.append(f"nested: its {len(parts[0])} components flattened one after another")
    else:
        a, e = _plain(actual, notes), _plain(expected, [])
        if expected.layout != actual.layout and not notes:
            notes.append(f"{layout_name(expected)} expected: densified")
    for side in (a, e):
        if side.numel() == 0:
            raise NoPicture(f"no heatmap for an empty tensor (shape {list(side.shape)})")
    if a.shape != e.shape:
        raise NoPicture(f"no heatmap: the shapes differ ({list(a.shape)} vs {list(e.shape)})")
    if a.numel() == 1:
        raise NoPicture(_single_value(a, e))
    return a, e, notes


def _single_value(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """The values themselves, for a pair of one element each: a one-cell heatmap would
    only hide them behind a colour bar."""
    import torch

    def value(tensor: torch.Tensor) -> Any:
        if tensor.is_complex():
            return complex(tensor.to(torch.complex128).item())
        if tensor.is_floating_point():
            return float(tensor.to(torch.float64).item())
        return tensor.item()

    def shown(number: Any) -> str:
        return str(number) if isinstance(number, bool) else f"{number:.8g}"

    a, e = value(actual), value(expected)
    text = f"no heatmap for a single value: actual {shown(a)}, expected {shown(e)}"
    if not isinstance(a, bool) and not isinstance(e, bool):
        text += f", |actual - expected| {abs(a - e):.4g}"
    return text


class Comparison(NamedTuple):
    """Two tensors made comparable (float64, CPU) and where they disagree."""

    actual: torch.Tensor
    expected: torch.Tensor
    difference: torch.Tensor  # |actual - expected|, 0 where both are the same NaN/Inf
    mismatched: torch.Tensor  # bool
    note: str


def compare(
    actual: torch.Tensor, expected: torch.Tensor, rtol: float | None, atol: float | None
) -> Comparison:
    """Compare two strided tensors of one shape (see :func:`plottable` for the others)."""
    import torch

    from pytest_torch.core.compare import default_tolerances

    a, e = actual.detach().cpu().resolve_conj().resolve_neg(), expected.detach().cpu()
    e = e.resolve_conj().resolve_neg()
    if rtol is None or atol is None:
        rtol, atol = default_tolerances(actual.dtype, expected.dtype)
    note = ""
    if a.is_complex() or e.is_complex():
        # |a| - |e| misses a change of phase: the difference is |a - e|
        ac, ec = a.to(torch.complex128), e.to(torch.complex128)
        mismatched = ~torch.isclose(ac, ec, rtol=rtol, atol=atol, equal_nan=True)
        same = (ac == ec) | (ac.isnan() & ec.isnan())
        difference = torch.where(same, torch.zeros(()), (ac - ec).abs())
        note = "complex: |actual| and |expected| shown, and |actual - expected|"
        return Comparison(ac.abs(), ec.abs(), difference, mismatched, note)
    if a.dtype == torch.bool or e.dtype == torch.bool:
        note = "bool: 1 is True, 0 is False; the difference panel is the mismatch map"
    a, e = a.to(torch.float64), e.to(torch.float64)
    # integers and booleans have zero default tolerances: exact
    mismatched = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    same_special = (a == e) | (a.isnan() & e.isnan())
    difference = torch.where(same_special, torch.zeros_like(a), (a - e).abs())
    return Comparison(a, e, difference, mismatched, note)


def _grid(length: int) -> tuple[int, int]:
    columns = max(1, math.ceil(math.sqrt(length)))
    return math.ceil(length / columns), columns


def _fold(tensor: torch.Tensor, pad: float) -> torch.Tensor:
    """1-D data as a near-square grid, padded with ``pad``."""
    import torch

    rows, columns = _grid(tensor.numel())
    flat = torch.full((rows * columns,), pad, dtype=tensor.dtype)
    flat[: tensor.numel()] = tensor.flatten()
    return flat.reshape(rows, columns)


class Panel(NamedTuple):
    label: str
    actual: torch.Tensor
    expected: torch.Tensor
    difference: torch.Tensor
    mismatched: torch.Tensor
    padding: torch.Tensor  # bool: cells that are not data
    pooled: int  # elements per cell along each side (1: none)


def _pool(panel: Panel) -> Panel:
    import torch
    import torch.nn.functional as F

    height, width = panel.actual.shape
    factor = max(1, math.ceil(max(height, width) / MAX_SIDE))
    if factor == 1:
        return panel

    def reduce(values: torch.Tensor, how: str) -> torch.Tensor:
        finite = torch.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)[None, None]
        if how == "max":
            out = F.max_pool2d(finite, factor, ceil_mode=True)
        else:
            out = F.avg_pool2d(finite, factor, ceil_mode=True)
        return out[0, 0]

    def any_pool(mask: torch.Tensor) -> torch.Tensor:
        return reduce(mask.to(torch.float64), "max") > 0

    return Panel(
        f"{panel.label + ', ' if panel.label else ''}each cell {factor}x{factor} elements",
        reduce(panel.actual, "mean"),
        reduce(panel.expected, "mean"),
        reduce(panel.difference, "max"),
        any_pool(panel.mismatched),
        ~any_pool(~panel.padding),
        factor,
    )


def panels(comparison: Comparison) -> tuple[list[Panel], int]:
    """2-D panels for the picture, and how many slices there were in all."""
    import torch

    a, e, d, m, _ = comparison
    if a.dim() <= 1:
        padding = _fold(torch.zeros(a.numel(), dtype=torch.bool), True)
        label = f"{a.numel()} elements, folded row by row"
        panel = Panel(
            label,
            _fold(a.reshape(-1), 0.0),
            _fold(e.reshape(-1), 0.0),
            _fold(d.reshape(-1), 0.0),
            _fold(m.reshape(-1), False),
            padding,
            1,
        )
        return [_pool(panel)], 1
    height, width = a.shape[-2], a.shape[-1]
    leading = a.shape[:-2]
    count = math.prod(leading) if leading else 1
    slices = [t.reshape(count, height, width) for t in (a, e, d, m)]

    def badness(i: int) -> tuple[int, float, int, int]:
        mismatched = slices[3][i]
        diff = slices[2][i][mismatched]
        non_finite = int((~diff.isfinite()).sum())
        finite = diff[diff.isfinite()]
        worst = float(finite.max()) if finite.numel() else 0.0
        return (-non_finite, -worst, -int(mismatched.sum()), i)

    ranked = sorted(range(count), key=badness)
    with_mismatches = [i for i in ranked if bool(slices[3][i].any())] or ranked[:1]
    order = with_mismatches[:MAX_SLICES]
    found = []
    for i in order:
        index = _unravel(i, tuple(leading))
        label = f"slice [{', '.join(map(str, index))}, :, :]" if leading else ""
        found.append(
            _pool(
                Panel(
                    label,
                    slices[0][i],
                    slices[1][i],
                    slices[2][i],
                    slices[3][i],
                    torch.zeros(height, width, dtype=torch.bool),
                    1,
                )
            )
        )
    return found, count


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


class Summary(NamedTuple):
    mismatched: int
    total: int
    #: largest finite |difference| among the mismatches and where (None: none finite)
    largest: float | None
    where: tuple[int, ...]
    #: mismatches where NaN/Inf appear on one side only
    non_finite: int


def summarise(comparison: Comparison) -> Summary:
    import torch

    d, m = comparison.difference, comparison.mismatched
    count = int(m.sum())
    finite = m & d.isfinite()
    non_finite = count - int(finite.sum())
    if not bool(finite.any()):
        return Summary(count, m.numel(), None, (), non_finite)
    flat = int(torch.where(finite, d, -1.0).reshape(-1).argmax())
    index = _unravel(flat, tuple(m.shape)) if m.dim() else ()
    return Summary(count, m.numel(), float(d.reshape(-1)[flat]), index, non_finite)


def draw(
    actual: torch.Tensor,
    expected: torch.Tensor,
    path: Path,
    *,
    name: str,
    rtol: float | None = None,
    atol: float | None = None,
) -> Path:
    """Draw the mismatch of two tensors of one shape into the PNG ``path``, atomically.

    Raises:
        NoPicture: the pair has no meaningful picture (see :func:`plottable`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    a, e, notes = plottable(actual, expected)
    comparison = compare(a, e, rtol, atol)
    shown, slices = panels(comparison)
    summary = summarise(comparison)
    where = f" at index {list(summary.where)}" if summary.where else ""
    figures = [f"{summary.mismatched} of {summary.total} elements mismatched"]
    if summary.largest is not None:
        figures.append(f"largest |difference| {summary.largest:.4g}{where}")
    if summary.non_finite:
        figures.append(f"{summary.non_finite} with NaN/Inf on one side only (magenta)")
    lines = [f"{name}: {_shape_text(actual)}, {_dtype_text(actual)}", "; ".join(figures)]
    extra = [*notes, comparison.note] if comparison.note else notes
    if slices > len(shown):
        extra.append(f"{len(shown)} of {slices} slices shown, worst first")
    if extra:
        lines.append("; ".join(extra))
    header = 0.28 * len(lines) + 0.35  # inches of title above the panels
    height = 3.7 * len(shown) + header
    figure = Figure(figsize=(13, height), dpi=100)
    FigureCanvasAgg(figure)
    figure.suptitle("\n".join(lines), fontsize=11, x=0.01, y=1 - 0.1 / height, ha="left", va="top")
    axes = figure.subplots(len(shown), 3, squeeze=False)
    for row, panel in zip(axes, shown, strict=True):
        _draw_row(row, panel)
    figure.subplots_adjust(
        left=0.04,
        right=0.95,
        bottom=0.7 / height,
        top=1 - header / height,
        wspace=0.25,
        hspace=0.6,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as temporary:
        figure.savefig(temporary, format="png")
    return path


def _shape_text(tensor: torch.Tensor) -> str:
    if tensor.is_nested:
        return f"nested, {tensor.size(0)} components"
    return f"shape {list(tensor.shape)}"


def _dtype_text(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    kind = layout_name(tensor)
    return dtype if kind in ("strided", "nested", "quantized") else f"{dtype}, {kind}"


def _draw_row(row: Any, panel: Panel) -> None:
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    def masked(values: Any, extra_mask: Any) -> Any:
        array = values.numpy()
        return np.ma.masked_array(array, mask=~np.isfinite(array) | extra_mask)

    padding = panel.padding.numpy()
    finite = [v.numpy()[np.isfinite(v.numpy()) & ~padding] for v in (panel.actual, panel.expected)]
    joined = np.concatenate(finite) if any(f.size for f in finite) else np.zeros(1)
    low, high = float(joined.min()), float(joined.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    diff = panel.difference.numpy()
    finite_diff = diff[np.isfinite(diff) & ~padding]
    top = float(finite_diff.max()) if finite_diff.size and finite_diff.max() > 0 else 1.0
    rows, columns = panel.actual.shape
    step = panel.pooled
    # pooled cells keep element coordinates on the axes
    extent = (-0.5 * step, (columns - 0.5) * step, (rows - 0.5) * step, -0.5 * step)
    for axis, values, title, cmap_name, limits in (
        (row[0], panel.actual, "actual", "viridis", (low, high)),
        (row[1], panel.expected, "expected", "viridis", (low, high)),
        (row[2], panel.difference, "|actual - expected|", "magma", (0.0, top)),
    ):
        cmap = colormaps[cmap_name].with_extremes(bad=PAD_COLOUR)
        image = axis.imshow(
            masked(values, padding),
            cmap=cmap,
            interpolation="nearest",
            aspect="auto",
            vmin=limits[0],
            vmax=limits[1],
            extent=extent,
        )
        bar = axis.figure.colorbar(image, ax=axis, fraction=0.046, pad=0.02)
        bar.formatter.set_useOffset(False)
        bar.update_ticks()
        axis.set_title(f"{title}: {panel.label}" if panel.label else title, fontsize=9)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        special = ~np.isfinite(values.numpy()) & ~padding
        if special.any():
            ys, xs = np.nonzero(special)
            axis.scatter(
                xs * step, ys * step, marker="s", s=18, c=NON_FINITE_COLOUR, label="NaN/Inf"
            )
            axis.legend(loc="upper right", fontsize=7, framealpha=0.8)
    mismatched = panel.mismatched.numpy() & ~padding
    ys, xs = np.nonzero(mismatched)
    if 0 < len(xs) <= 4000:  # more are not marked one by one: the colours show them
        row[2].scatter(
            xs * step,
            ys * step,
            marker="s",
            s=30,
            facecolors="none",
            edgecolors="#00e5ff",
            linewidths=0.8,
            label="mismatch",
        )
    for axis in row:  # under the panel, where it hides nothing
        if axis.get_legend_handles_labels()[0]:
            axis.legend(
                loc="upper left", bbox_to_anchor=(0.0, -0.07), fontsize=8, ncol=2, frameon=False
            )
