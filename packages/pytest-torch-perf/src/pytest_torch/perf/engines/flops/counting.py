"""Counting the FLOPs of a call, or of a block, with torch's ``FlopCounterMode``, and
saying which work the count leaves out.

``FlopCounterMode`` counts only what it has a formula for: matrix products (``mm``,
``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``), convolutions and the fused attention
kernels; pointwise ops, reductions, normalisations, copies and views are not FLOPs in
its sense, by design. An op without a formula that it cannot decompose runs whole and
counts nothing, so a count can be short, silently, exactly where the work is: measured
here (torch 2.13, CPU), ``nn.TransformerEncoderLayer(64, 4, 128)`` in eval under
``inference_mode`` takes its fused fast path, one ``aten._transformer_encoder_layer_fwd``,
and counts 0 FLOPs; with autograd on it counts 2,097,152 (its linear layers) but not its
attention, an ``aten._scaled_dot_product_flash_attention_for_cpu`` (the CPU kernel behind
``F.scaled_dot_product_attention``, which has no formula, while the CUDA ones do).
``nn.MultiheadAttention`` in eval (``aten._native_multi_head_attention``), ``nn.LSTM``
on CPU (``aten.mkldnn_rnn_layer``), ``nn.Bilinear`` (``aten._trilinear``), matrix-vector
products (``aten.mv``, ``aten.addmv``, ``aten.dot``), ``torch.cdist`` and the
``torch.linalg`` factorisations and solvers count 0 as well. So every count says which
such ops ran (:attr:`FlopCount.uncounted`): a second dispatch mode under the counter sees
each op the counter ran whole (not the composites it decomposed) and keeps those that

- have no formula in the counter's registry (``torch.utils.flop_counter.flop_registry``),
- are not views and not tagged ``torch.Tag.pointwise``, and
- are named for matrix, convolution or attention work (:func:`is_matrix_work`).

The name rule is checked against every operator torch registers (``test_counting``):
it matches every op that has a formula and no pointwise op. A custom op (one outside
torch's own namespaces: ``torch.library.custom_op``, an extension's) runs whole, its
kernel below every dispatch mode, so each one without a formula (registered with
``torch.utils.flop_counter.register_flop_formula``) is named too, whatever its name.
Its limit: a kernel of torch's own whose name says nothing of its work is not named;
work outside torch's dispatcher (NumPy, a Triton kernel launched by hand) is not seen;
FFTs are outside the counter's definition, like pointwise ops.

Activation checkpointing (``torch.utils.checkpoint``, ``use_reentrant=False``) runs a
block's forward again in backward; the count includes that work, as it ran, and says how
much of it was recomputation (:attr:`FlopCount.recomputed`): torch's module tracker files
recomputed ops under the recomputed modules and also under the module whose backward was
running, which may have no FLOPs of its own (an activation). The watcher knows a
recompute by the saved-tensor hooks torch's checkpoint pushes for it; the reentrant
variant leaves no such mark and its recomputation is counted but not told apart.

Each counted op's FLOPs are also kept by its input shapes (:attr:`FlopCount.by_shape`,
``aten.mm [100, 64] x [64, 64]``), so a regression can name the shapes whose work grew.

A count is exact and deterministic: the same ops on the same shapes count the same, on
any device (the device decides which kernels run: CPU and CUDA may differ). A module
runs under ``torch.inference_mode()`` (its train or eval mode is the caller's); any
other callable runs as given. Every mode is left on the way out, also when the call
raises.

torch is imported only when counting: ``FlopCount`` and the name rule are plain Python.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

#: how many of the largest modules and ops a baseline keeps
KEPT = 20

#: a part of an op's name (split at "_") that names matrix, convolution or attention work:
#: matrix products (``mm``, ``_int_mm``, ``addmv``, ``vdot``, ``_trilinear``), every
#: convolution kernel (``conv2d``, ``cudnn_convolution``, ``slow_conv3d``), attention and
#: fused transformer kernels, recurrent layers, pairwise distances, and linear algebra
#: (factorisations, solvers, determinants)
_WORK_PART = re.compile(
    r"(add|addb|b|baddb|hsp|sp|s)?mm|(add)?mv|v?dot|matmul|einsum|tensordot"
    r"|conv(\dd|olution)?|(bi|tri)?linear|attention|transformer|rnn|lstm|gru|cdist|pdist"
    r"|euclidean|addr"
    r"|cholesky|lu|qr|svd|eig(h|vals|valsh)?|solve|(slog)?det|lstsq|pinv|ldl"
    r"|householder|geqrf|orgqr|ormqr"
)
_WORK_PHRASES = ("linalg_inv", "matrix_exp", "affine_grid")
#: parts and phrases of names that match the above but only move weights or apply gates:
#: weight (un)packing and reordering, ``_cudnn_rnn_flatten_weight``, ``lu_unpack``, and
#: the pointwise gate kernels of fused LSTM/GRU cells (their matmuls run, and count,
#: before them)
_NOT_WORK_PARTS = frozenset({"prepack", "unpack", "reorder", "flatten", "quantize"})
_NOT_WORK_PHRASES = ("thnn_fused", "thnn_differentiable")


def is_matrix_work(op: str) -> bool:
    """Whether the op named ``op`` ("aten._native_multi_head_attention", a namespace
    optional) does matrix, convolution or attention work, by its name."""
    name = op.replace("::", ".").rpartition(".")[2]
    parts = [part for part in name.split("_") if part]
    if _NOT_WORK_PARTS.intersection(parts) or any(p in name for p in _NOT_WORK_PHRASES):
        return False
    return any(_WORK_PART.fullmatch(part) for part in parts) or any(
        phrase in name for phrase in _WORK_PHRASES
    )


def fmt_flops(count: float) -> str:
    """2097152 -> "2,097,152 FLOPs": every digit, a count is exact."""
    return f"{count:,.0f} FLOPs"


@dataclass(frozen=True)
class FlopCount:
    """The FLOPs of one call (or block), and the work they leave out."""

    total: int
    #: aten op ("aten.addmm") -> its FLOPs, largest first
    by_op: dict[str, int] = field(default_factory=dict)
    #: module path ("TransformerEncoderLayer.linear1") -> its FLOPs, its submodules'
    #: included, largest first; FLOPs outside every module are only in by_op
    by_module: dict[str, int] = field(default_factory=dict)
    #: ops that ran and do matrix, convolution or attention work without a FLOP formula
    #: -> how many times they ran: their work is not in the figures above
    uncounted: dict[str, int] = field(default_factory=dict)
    #: FLOPs of the total that ran again in backward, recomputed by activation
    #: checkpointing
    recomputed: int = 0
    #: aten op and its tensor inputs' shapes ("aten.mm [100, 64] x [64, 64]") -> its
    #: FLOPs, largest first
    by_shape: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The baseline file's entry: the total, the largest :data:`KEPT` modules and
        ops, and every uncounted op."""
        entry: dict[str, Any] = {
            "total": self.total,
            "by_module": _largest(self.by_module, KEPT),
            "by_op": _largest(self.by_op, KEPT),
            "uncounted": dict(sorted(self.uncounted.items())),
        }
        if self.recomputed:
            entry["recomputed"] = self.recomputed
        if self.by_shape:
            entry["by_shape"] = _largest(self.by_shape, KEPT)
        return entry

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlopCount:
        """The count of a baseline entry; KeyError, TypeError or ValueError for a
        malformed one."""
        return cls(
            total=_whole(data["total"], "total"),
            by_module=_counts(data.get("by_module", {}), "by_module"),
            by_op=_counts(data.get("by_op", {}), "by_op"),
            uncounted=_counts(data.get("uncounted", {}), "uncounted"),
            recomputed=_whole(data.get("recomputed", 0), "recomputed"),
            by_shape=_counts(data.get("by_shape", {}), "by_shape"),
        )


def _whole(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number >= 0, got {value!r}")
    return value


def _counts(data: object, what: str) -> dict[str, int]:
    if not isinstance(data, Mapping):
        raise TypeError(f"{what} must be an object of counts, got {data!r}")
    return {str(name): _whole(value, f"{what}[{name!r}]") for name, value in data.items()}


def _largest(counts: Mapping[str, int], keep: int | None = None) -> dict[str, int]:
    """``counts`` largest first (ties by name), the first ``keep`` of them."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:keep])


class FlopCounting:
    """Counts the FLOPs of everything run in ``with FlopCounting() as counting:``;
    ``counting.result`` holds them once the block is left (also when it raised; an
    empty count before). One use per instance."""

    def __init__(self) -> None:
        self.result = FlopCount(0)
        self._stack: contextlib.ExitStack | None = None
        self._counts: Callable[[], dict[str, dict[Any, int]]] | None = None
        self._uncounted: Counter[str] = Counter()
        self._shares: _OpShares | None = None

    def __enter__(self) -> FlopCounting:
        from torch.utils.flop_counter import FlopCounterMode

        _active.append(self)
        if self._stack is not None:
            raise RuntimeError("a FlopCounting counts once: make a new one")
        counter = FlopCounterMode(display=False)
        self._counts = counter.get_flop_counts
        # read each time: entering the counter empties its counts
        self._shares = _OpShares(lambda: sum(counter.flop_counts.get("Global", {}).values()))
        with contextlib.ExitStack() as stack:
            # the watcher first: under the counter, it sees the ops the counter runs whole
            watcher = _watcher(counter.flop_registry, self._uncounted, self._shares)
            stack.enter_context(watcher)
            stack.enter_context(counter)
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._stack is None or self._counts is None or self._shares is None:
            raise RuntimeError("FlopCounting left before it was entered")
        try:
            self._stack.__exit__(kind, error, traceback)
        finally:
            _active.remove(self)
            self._shares.end()
            self.result = _count_of(self._counts(), self._uncounted, self._shares)


#: the countings running now (a FLOP budget's around a test body)
_active: list[FlopCounting] = []


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run the block uncounted by the countings running now: a measuring fixture's
    repeated calls inside a body under a FLOP budget are the harness's work, not the
    body's (their number depends on the machine). Every dispatch mode is set aside
    for the block and put back after."""
    if not _active:
        yield
        return
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield


@contextlib.contextmanager
def harness_work(target: Any, inputs: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterator[None]:
    """Around a measuring fixture's work on ``target(*inputs, **kwargs)`` (``latency``,
    ``perf_baseline``) in a body the countings running now watch (a FLOP budget's): they
    count one call, as the body asked for one (a module under ``torch.inference_mode()``,
    as the fixtures run it), and none of the harness's repeats, whose number depends on
    the machine. Outside such a body it does nothing."""
    if not _active:
        yield
        return
    import torch

    inference = isinstance(target, torch.nn.Module)
    with torch.inference_mode() if inference else contextlib.nullcontext():
        target(*inputs, **kwargs)
    with paused():
        yield


def count_flops(target: Callable[..., object], *inputs: Any, **kwargs: Any) -> FlopCount:
    """The FLOPs of one call ``target(*inputs, **kwargs)``; an ``nn.Module`` is called
    under ``torch.inference_mode()`` (see the module docstring)."""
    __tracebackhide__ = True
    import torch

    inference = isinstance(target, torch.nn.Module)
    calling = torch.inference_mode() if inference else contextlib.nullcontext()
    with FlopCounting() as counting, calling:
        target(*inputs, **kwargs)
    return counting.result


def _count_of(
    counts: Mapping[str, Mapping[Any, int]], uncounted: Mapping[str, int], shares: _OpShares
) -> FlopCount:
    by_op = {str(op): flops for op, flops in counts.get("Global", {}).items() if flops}
    modules = {module: sum(ops.values()) for module, ops in counts.items() if module != "Global"}
    by_module = {module: flops for module, flops in modules.items() if flops}
    return FlopCount(
        total=sum(by_op.values()),
        by_op=_largest(by_op),
        by_module=_largest(by_module),
        uncounted=dict(sorted(uncounted.items())),
        recomputed=shares.recomputed,
        by_shape=_largest(shares.by_shape),
    )


class _OpShares:
    """Each counted op's FLOPs, by its input shapes, and the share of them run as
    activation-checkpoint recomputation. The counter adds an op's FLOPs once the op has
    run, so an op's FLOPs are how much the counter's total (``totals()``) grew by the
    next op the watcher sees, or by the end."""

    def __init__(self, totals: Callable[[], int]) -> None:
        self.recomputed = 0
        self.by_shape: Counter[str] = Counter()
        self._totals = totals
        self._last = 0
        self._op: tuple[Any, tuple[tuple[int, ...], ...], bool] | None = None

    def op(self, func: Any, args: tuple[Any, ...], recomputing: bool) -> None:
        now = self._totals()
        if self._op is not None and now > self._last:
            name, shapes, recomputed = self._op
            self.by_shape[_shape_key(name, shapes)] += now - self._last
            self.recomputed += (now - self._last) if recomputed else 0
        self._last = now
        self._op = (func, _shapes(args), recomputing) if func is not None else None

    def end(self) -> None:
        self.op(None, (), False)


def _shapes(args: tuple[Any, ...]) -> tuple[tuple[int, ...], ...]:
    import torch

    return tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))


def _shape_key(func: Any, shapes: tuple[tuple[int, ...], ...]) -> str:
    """The op and the shapes of its tensor inputs: ``aten.mm [100, 64] x [64, 64]``."""
    return " ".join([str(func.overloadpacket), " x ".join(str(list(s)) for s in shapes)]).strip()


def _recomputing() -> bool:
    """Whether the op about to run is checkpoint recomputation: autograd runs a backward
    and the innermost saved-tensor hooks are those torch's non-reentrant checkpoint
    pushes around its recompute (``torch.utils.checkpoint._recomputation_hook``)."""
    import torch

    if torch._C._current_graph_task_id() == -1:
        return False
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(True)
    return hooks is not None and "_recomputation_hook" in getattr(hooks[0], "__qualname__", "")


def _watcher(
    formulas: Mapping[Any, Any], uncounted: Counter[str], shares: _OpShares
) -> TorchDispatchMode:
    """A dispatch mode that adds to ``uncounted`` each op it sees run that does matrix,
    convolution or attention work and has no formula in ``formulas``, and hands
    ``shares`` each op, its inputs and whether it is checkpoint recomputation."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class FormulaLessWork(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self,
            func: torch._ops.OpOverload,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            __tracebackhide__ = True
            shares.op(func, args, _recomputing())
            if _uncounted_work(func, formulas):
                uncounted[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    return FormulaLessWork()  # type: ignore[no-untyped-call]


#: torch's own operator namespaces: an op outside them is a custom op (``torch.library``,
#: an extension's), which runs whole under the counter, whatever it computes inside
TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "profiler", "c10d", "_c10d_functional", "_c10d_functional_autograd",
     "_dtensor", "debugprims", "rngprims", "inductor", "inductor_prims", "quantized",
     "quantized_decomposed", "quantization", "_quantized", "higher_order", "mkldnn",
     "mkldnn_prepacked", "onednn", "mkl", "fbgemm", "xnnpack", "symm_mem", "sparse",
     "static_runtime", "_native", "_test", "debug_mode_ops", "export", "c10d_functional",
     "fsdp", "flex_lib", "onnx", "onnx_symbolic", "streams", "_inductor_test"}
)  # fmt: skip


def is_custom_op(op: str) -> bool:
    """Whether the op named ``op`` ("mylib.mlp", "mylib::mlp") is a custom op: not in
    torch's own namespaces, nor a ``torch.library.custom_op`` that torch's own modules
    define (they add namespaces as they are imported: ``cplib``, ``fsdp``...)."""
    name = op.replace("::", ".")
    namespace, _, rest = name.partition(".")
    if namespace in TORCH_NAMESPACES:
        return False
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:  # a torch without it: its namespaces decide alone
        return True
    definition = OPDEFS.get(f"{namespace}::{rest.partition('.')[0]}")
    module = getattr(getattr(definition, "_init_fn", None), "__module__", "") or ""
    return not (module == "torch" or module.startswith("torch."))


def _uncounted_work(func: torch._ops.OpOverload, formulas: Mapping[Any, Any]) -> bool:
    import torch

    if func.overloadpacket in formulas or getattr(func, "is_view", False):
        return False
    name = str(func.overloadpacket)
    if is_custom_op(name):  # its kernel runs below every dispatch mode: its work is unseen
        return True
    return torch.Tag.pointwise not in func.tags and is_matrix_work(name)
