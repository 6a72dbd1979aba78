"""Finding the operations that would make the host wait for a GPU.

The question asked of every operation is "would this synchronise if the tensors lived
on a GPU?", answered the same on every device:

- a dispatch mode sees every aten operation, including those inside composite ops,
  and judges it with ``sync_rules``: host reads, data-dependent shapes, and the checks
  CUDA kernels make on the host (``multinomial``, ``linalg.inv``...). Reads that only
  CPU kernels make stay below the dispatcher and are not reported;
- the Python-level reads and moves the dispatcher cannot see (``.item()``, ``if t:``,
  ``print(t)``, ``.tolist()``, ``.cpu()``, ``.to(...)``, ``torch.tensor(...)``) are
  wrapped for the duration of the call and restored afterwards;
- each tensor has a placement: on the device, or on the host by design. A tensor on an
  accelerator is on the device. On a CPU-only run, tensors that existed before the call
  (inputs, parameters, buffers, module attributes) are on the device, except optimizer
  step counters and a dataset's tensors; tensors made inside the call follow the call
  that made them (a factory without a device, ``.cpu()`` and ``.to("cpu")`` make host
  tensors; ``.to(x.device)`` keeps a tensor where it is).

On CUDA the backend's own sync check is armed as well; what it reports is merged into the
operation already found (one entry, at the user's line), or added as ``cuda sync``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from pytest_torch.perf import sync_sites
from pytest_torch.perf.sync_rules import (
    OPERATIONS,
    SYNC_OPERATIONS,
    aten_sync,
    cpu_only_reads,
    host_index,
    masked_fill_put,
)

_INDEX_PUT = ("index_put_", "index_put", "_index_put_impl_")
_INDEXING = ("index", *_INDEX_PUT)
#: outputs that live on the host by design, by aten op: (position, ...)
_HOST_OUTPUTS = {
    # torch/nn/utils/rnn.py: batch_sizes "should always be a CPU torch.int64 tensor"
    "_pack_padded_sequence": (1,),
}

__all__ = ["SYNC_OPERATIONS", "SyncEvent", "assert_no_host_sync", "find_host_syncs"]

#: advice that depends on the call that led to the sync, by (operation, callee's last name)
_ADVICE_BY_CAUSE: dict[tuple[str, str], str] = {
    ("item", "tensor"): "torch.stack([...]) of the tensors keeps them on the device",
    ("to(device)", "tensor"): "torch.full/zeros/arange(..., device=x.device) creates it on the"
    " device; keep constants in a registered buffer",
    ("item", "one_hot"): "pass num_classes=: without it the maximum is read on the host",
    ("to(cpu)", "ctc_loss"): "give input_lengths and target_lengths as Python lists or host"
    " tensors (they are used on the host)",
    ("masked_select", "cross_entropy"): "reduction='sum' divided by weight[target].sum() (or"
    " label_smoothing=0 with class weights) keeps the normalisation on the device",
}


@dataclass(frozen=True)
class SyncEvent:
    """One synchronising operation, where the user's code performed it."""

    operation: str
    filename: str
    lineno: int
    source: str
    #: device type of the tensor it ran on ("" when unknown)
    device: str = ""
    #: the call on the user's line that led to it ("torch.multinomial"), "" when direct
    cause: str = ""
    #: how many times it happened at this place in one call
    count: int = 1
    #: True when the CUDA backend's own sync check fired for it as well
    confirmed: bool = False
    #: the installed library's line that did it, below the user's line ("" when none)
    via: str = ""

    def title(self) -> str:
        """``torch.multinomial → multinomial`` or ``F.one_hot → item``."""
        if not self.cause:
            return self.operation
        return f"{self.cause} → {self.operation}"

    def describe(self) -> str:
        where = f"{sync_sites.shown_path(self.filename)}:{self.lineno}"
        code = f"  {self.source}" if self.source else ""
        on = f" [{self.device}]" if self.device else ""
        times = f" (x{self.count})" if self.count > 1 else ""
        via = f" (in {self.via})" if self.via else ""
        return f"{self.title()}{on} at {where}{via}{times}{code}"

    def why(self) -> str:
        """Why it makes the host wait on a GPU."""
        return OPERATIONS[self.operation].why if self.operation in OPERATIONS else ""

    def instead(self) -> str:
        """The sync-free spelling, "" when there is none."""
        key = (self.operation, self.cause.rsplit(".", 1)[-1])
        if key in _ADVICE_BY_CAUSE:
            return _ADVICE_BY_CAUSE[key]
        return OPERATIONS[self.operation].instead if self.operation in OPERATIONS else ""


#: what a call is named when it is the sync itself, not a cause of it
_OWN_NAMES = {"to(cpu)": {"to"}, "to(device)": {"to"}, "where(cond)": {"where"}}


def _own_name(cause: str, operation: str) -> bool:
    last = cause.rsplit(".", 1)[-1]
    return (
        last == operation
        or last in _OWN_NAMES.get(operation, ())
        or (operation == "nonzero" and last == "argwhere")
    )


@dataclass
class _Pending:
    operation: str
    site: sync_sites.Site
    device: str
    confirmed: bool = False
    #: the call that led to it, when the user's line does not show one
    cause: str = ""


#: aten op names by op overload
_NAMES: dict[Any, str] = {}


def _tensors(values: Iterable[Any], found: list[Any] | None = None) -> list[Any]:
    """The tensors in nested lists, tuples and dicts."""
    Tensor = sys.modules["torch"].Tensor  # imported already: this runs under torch
    found = [] if found is None else found
    for value in values:
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            _tensors(value, found)
        elif isinstance(value, dict):
            _tensors(value.values(), found)
    return found


def _is_sync_warning(warning: warnings.WarningMessage) -> bool:
    return "synchroniz" in str(warning.message).lower()


@dataclass(eq=False)
class _Placements:
    """Where each tensor would live on a GPU run."""

    #: the tensors on the host by design, by id, with a weak reference that proves the id
    #: still names the same tensor (a weak-key dictionary costs twice as much per op)
    host: dict[int, Any] = field(default_factory=dict)
    accelerated: bool = False  # the call runs on an accelerator: physical placement is exact

    def on_device(self, tensor: Any) -> bool:
        kind: str = tensor.device.type
        if kind != "cpu":
            return kind != "meta"
        if self.accelerated:
            return False
        ref = self.host.get(id(tensor))
        return ref is None or ref() is not tensor

    def mark(self, tensor: Any, on_device: bool) -> None:
        if on_device:
            self.host.pop(id(tensor), None)
        elif tensor.device.type == "cpu":
            self.host[id(tensor)] = weakref.ref(tensor)


@dataclass(eq=False)
class _Recorder:
    """What one call did: its syncs and its tensors' placements."""

    placements: _Placements = field(default_factory=_Placements)
    pending: list[_Pending] = field(default_factory=list)
    caught: list[warnings.WarningMessage] = field(default_factory=list)
    #: >0 while a wrapped Python-level call runs: what it does inside is judged already
    depth: int = 0
    thread: int = field(default_factory=threading.get_ident)
    #: the CUDA sync debug mode before the call, once CUDA's own check is armed
    cuda_mode: Any = None

    def arm_cuda(self) -> None:
        """Arm CUDA's own sync check ("warn"), once: when the call starts with CUDA
        initialised, or at its first CUDA tensor (never initialising CUDA itself)."""
        import torch

        if self.cuda_mode is None:
            self.cuda_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")

    def add(self, operation: str, frame: FrameType | None, device: str) -> _Pending:
        if threading.get_ident() != self.thread:
            # an autograd thread (CUDA backward): the user's line is where the checked
            # call's thread waits, in loss.backward()
            frame = sys._current_frames().get(self.thread, frame)
        record = _Pending(operation, sync_sites.site_of(frame), device)
        self.pending.append(record)
        return record

    def target(self, spec: Any, node: Any) -> bool | None:
        """Whether a move to ``spec`` lands on the device (True), the host (False) or stays."""
        import torch

        if spec is None:
            return None
        if isinstance(spec, torch.Tensor):
            return self.placements.on_device(spec)
        try:
            device = torch.device(spec)
        except (RuntimeError, TypeError, ValueError):
            return None
        if device.type == "meta":
            return None
        if device.type != "cpu":
            return True
        if self.placements.accelerated:
            return False
        # on a CPU-only run, "cpu" is the device unless the code names the host literally
        return not sync_sites.literal_host(node)

    def run(
        self,
        record: _Pending | None,
        frame: FrameType | None,
        cause: str,
        call: Callable[[], Any],
        inside: bool = True,
    ) -> Any:
        """Run ``call`` (``inside``: as a wrapped call, whose own ops are judged already);
        fold the CUDA backend's sync warnings into ``record``."""
        before = len(self.caught)
        self.depth += inside
        try:
            result = call()
        finally:
            self.depth -= inside
        if len(self.caught) != before:
            self.fold(before, record, frame, cause)
        return result

    def fold(
        self, before: int, record: _Pending | None, frame: FrameType | None, cause: str
    ) -> None:
        """The sync warnings caught since ``before`` belong to ``record`` (or a new one)."""
        fired = [w for w in self.caught[before:] if _is_sync_warning(w)]
        if not fired:
            return
        for warning in fired:
            self.caught.remove(warning)
        if record is None:
            record = self.add("cuda sync", frame, "cuda")
            record.cause = record.site.callee or cause
        record.confirmed = True

    def events(self) -> list[SyncEvent]:
        merged: dict[tuple[str, str, int, str], SyncEvent] = {}
        for record in self.pending:
            site = record.site
            cause = site.callee or record.cause
            if _own_name(cause, record.operation):  # `t.item` for "item": no news
                cause = ""
            key = (record.operation, site.filename, site.lineno, cause)
            if key in merged:
                event = merged[key]
                merged[key] = replace(
                    event, count=event.count + 1, confirmed=event.confirmed or record.confirmed
                )
            else:
                merged[key] = SyncEvent(
                    record.operation,
                    site.filename,
                    site.lineno,
                    site.source,
                    record.device,
                    cause,
                    1,
                    record.confirmed,
                    site.via,
                )
        return list(merged.values())


#: the recorders of the calls running now, per thread, innermost last
_ACTIVE: dict[int, list[_Recorder]] = {}
_LOCK = threading.Lock()
#: one checked call at a time per process (nested ones in the same thread are fine):
#: warnings.catch_warnings and the wrappers are process-wide
_CALLS = threading.RLock()
_PATCHED: list[tuple[Any, str, Any, bool]] = []


def _current() -> _Recorder | None:
    """The innermost recorder of this thread's checked calls."""
    stack = _ACTIVE.get(threading.get_ident())
    return stack[-1] if stack else None


def _innermost(recorder: _Recorder) -> bool:
    """Whether no call checked inside ``recorder``'s call is running (any thread: autograd
    runs CUDA backward ops on its own threads)."""
    stack = _ACTIVE.get(recorder.thread)
    return stack is not None and len(stack) > 0 and stack[-1] is recorder


def _device_type(tensor: Any) -> str:
    return str(tensor.device.type)


def _pins_host_copy(tensor: Any) -> bool:
    """Whether ``tensor.to("cpu", non_blocking=True)`` copies without the host waiting:
    for a strided CUDA tensor, ``_to_copy`` allocates the host copy in pinned memory
    (``pin_out`` in TensorConversions.cpp, torch 2.4 to 2.13) and the copy is queued
    on the stream. A CPU tensor here stands for one on a GPU."""
    import torch

    return _device_type(tensor) in ("cuda", "cpu") and tensor.layout == torch.strided


def _pinned(tensor: Any) -> bool:
    """Whether a host tensor is in pinned memory; on a machine without CUDA none can
    be, and a host tensor stands for a pinned one."""
    import torch

    if not torch.cuda.is_available():
        return True
    try:
        return bool(tensor.is_pinned())
    except Exception:
        return False


def _read(operation: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """A tensor method that reads the tensor on the host."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _current()
        if recorder is None or recorder.depth:
            return original(self, *args, **kwargs)
        frame = sys._getframe(1)
        record = None
        if recorder.placements.on_device(self):
            name = operation
            if operation == "format":
                name = "item" if self.dim() == 0 and type(self).__name__ == "Tensor" else "print"
            record = recorder.add(name, frame, _device_type(self))
        return recorder.run(record, frame, "", lambda: original(self, *args, **kwargs))

    return wrapper


def _fresh(result: Any, source: Any) -> Any:
    """A tensor object of its own for a move that a CPU-only run makes in place."""
    return result.view_as(result) if result is source else result


def _move_to(original: Callable[..., Any]) -> Callable[..., Any]:
    """Tensor.to: a copy between host and device syncs; a same-device move does not."""
    import torch

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _current()
        if recorder is None or recorder.depth:
            return original(self, *args, **kwargs)
        spec = kwargs.get("device")
        first = args[0] if args else None
        if isinstance(first, (str, int, torch.device, torch.Tensor)) and first is not True:
            spec = first if first is not False else spec
        frame = sys._getframe(1)
        node = None
        call = sync_sites.call_in(sync_sites.caller_frame(frame))
        if call is not None and sync_sites.dotted(call.func).rsplit(".", 1)[-1] == "to":
            node = sync_sites.argument(call, 0, "device")
        non_blocking = bool(kwargs.get("non_blocking")) or any(a is True for a in args[1:3])
        return _move(
            recorder,
            self,
            recorder.target(spec, node),
            non_blocking,
            frame,
            "to",
            lambda: original(self, *args, **kwargs),
        )

    return wrapper


def _move(
    recorder: _Recorder,
    tensor: Any,
    target: bool | None,
    non_blocking: bool,
    frame: FrameType | None,
    name: str,
    call: Callable[[], Any],
) -> Any:
    source = recorder.placements.on_device(tensor)
    record = None
    if target is not None and target != source:
        if source:
            if not (non_blocking and name == "to" and _pins_host_copy(tensor)):
                record = recorder.add(
                    "cpu" if name == "cpu" else "to(cpu)", frame, _device_type(tensor)
                )
        elif not non_blocking:
            record = recorder.add("to(device)", frame, _device_type(tensor))
    result = recorder.run(record, frame, name, call)
    if target is not None and target != source:
        result = _fresh(result, tensor)
        recorder.placements.mark(result, target)
    return result


def _moves_to(target: bool, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A tensor method that moves to the device (``.cuda()``) or the host (``.cpu()``)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = _current()
            if recorder is None or recorder.depth:
                return original(self, *args, **kwargs)
            non_blocking = bool(kwargs.get("non_blocking")) or any(a is True for a in args)
            return _move(
                recorder,
                self,
                target,
                non_blocking,
                sys._getframe(1),
                name,
                lambda: original(self, *args, **kwargs),
            )

        return wrapper

    return make


def _values_on_device(recorder: _Recorder, data: Any) -> list[Any]:
    import torch

    if isinstance(data, torch.Tensor):
        return []
    return [t for t in _tensors([data]) if recorder.placements.on_device(t)]


def _factory(original: Callable[..., Any], takes_data: bool) -> Callable[..., Any]:
    """torch.zeros, torch.tensor...: host tensors unless a device is given."""
    import torch

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recorder = _current()
        if recorder is None or recorder.depth:
            return original(*args, **kwargs)
        frame = sys._getframe(1)
        call = sync_sites.call_in(sync_sites.caller_frame(frame))
        spec = kwargs.get("device")
        target = recorder.target(spec, sync_sites.argument(call, 99, "device"))
        data = args[0] if args else kwargs.get("data")
        record = None
        if takes_data:
            on_device = _values_on_device(recorder, data)
            if on_device:
                record = recorder.add("item", frame, _device_type(on_device[0]))
            elif isinstance(data, torch.Tensor):
                source = recorder.placements.on_device(data)
                if target is None:
                    target = source
                elif target and not source:
                    record = recorder.add("to(device)", frame, _device_type(data))
                elif source and not target:
                    record = recorder.add("to(cpu)", frame, _device_type(data))
            elif target:
                record = recorder.add("to(device)", frame, "cpu" if spec is None else str(spec))
        # a device tensor given to a factory as a size or a value is read inside it
        # (arange(t.max())): only the data of torch.tensor(...) is judged here already
        result = recorder.run(record, frame, "", lambda: original(*args, **kwargs), takes_data)
        if isinstance(result, torch.Tensor):
            if isinstance(data, torch.Tensor) and result is data and target is not None:
                result = _fresh(result, data)
            recorder.placements.mark(result, bool(target))
        return result

    return wrapper


def _new_tensor(original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _current()
        if recorder is None or recorder.depth:
            return original(self, data, *args, **kwargs)
        frame = sys._getframe(1)
        record = None
        target = recorder.placements.on_device(self)
        if kwargs.get("device") is not None:
            target = bool(recorder.target(kwargs["device"], None))
        if _values_on_device(recorder, data):
            record = recorder.add("item", frame, _device_type(self))
        elif target:
            record = recorder.add("to(device)", frame, _device_type(self))
        result = recorder.run(
            record,
            frame,
            "",
            lambda: original(self, data, *args, **kwargs),
        )
        recorder.placements.mark(result, target)
        return result

    return wrapper


def _cross_entropy(original: Callable[..., Any]) -> Callable[..., Any]:
    """Label smoothing with class weights and a mean: the C++ composite reads on the host.

    aten/src/ATen/native/LossNLL.cpp cross_entropy_loss_label_smoothing normalises by
    ``weight.gather(0, target.masked_select(~ignore_mask))`` — but takes a sync-free
    branch under any dispatch mode, so the dispatcher never shows it.
    """

    def wrapper(
        input: Any,
        target: Any,
        weight: Any = None,
        reduction: int = 1,
        ignore_index: int = -100,
        label_smoothing: float = 0.0,
    ) -> Any:
        recorder = _current()
        if (
            recorder is not None
            and not recorder.depth
            and weight is not None
            and label_smoothing > 0
            and reduction == 1  # mean
            and not target.is_floating_point()  # class indices, not probabilities
            and recorder.placements.on_device(weight)
        ):
            recorder.add("masked_select", sys._getframe(1), _device_type(weight))
        return original(input, target, weight, reduction, ignore_index, label_smoothing)

    return wrapper


def _ctc_loss(original: Callable[..., Any]) -> Callable[..., Any]:
    """CTC with lengths given as device tensors copies them to the host.

    aten/src/ATen/native/LossCTC.cpp ctc_loss (Tensor lengths) does
    ``input_lengths.to(Device(kCPU), kLong)`` — a no-op on a CPU run, so never dispatched.
    """

    def wrapper(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        recorder = _current()
        if recorder is not None and not recorder.depth:
            lengths = [t for t in (input_lengths, target_lengths) if _is_tensor(t)]
            on_device = [t for t in lengths if recorder.placements.on_device(t)]
            if on_device:
                recorder.add("to(cpu)", sys._getframe(1), _device_type(on_device[0]))
        return original(log_probs, targets, input_lengths, target_lengths, *args, **kwargs)

    return wrapper


def _host_results(positions: tuple[int, ...]) -> Callable[[Any], Callable[..., Any]]:
    """A function whose results at ``positions`` live on the host by design."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            recorder = _current()
            if recorder is not None:
                for position in positions:
                    if _is_tensor(result[position]):
                        recorder.placements.mark(result[position], False)
            return result

        return wrapper

    return make


def _is_tensor(value: Any) -> bool:
    return isinstance(value, sys.modules["torch"].Tensor)


_FACTORIES = (
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye",
    "rand", "randn", "randint", "randperm", "empty_strided", "scalar_tensor",
)  # fmt: skip


def _patch(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    own = name in vars(owner)
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    _PATCHED.append((owner, name, original, own))


def _install() -> None:
    import torch

    tensor = torch.Tensor
    for name, operation in (
        ("item", "item"),
        ("__bool__", "bool"),
        ("__float__", "float"),
        ("__int__", "int"),
        ("__index__", "int"),
        ("tolist", "tolist"),
        ("numpy", "numpy"),
        ("__repr__", "print"),
        ("__format__", "format"),
    ):
        _patch(tensor, name, functools.partial(_read, operation))
    _patch(tensor, "to", _move_to)
    _patch(tensor, "cpu", _moves_to(False, "cpu"))
    _patch(tensor, "cuda", _moves_to(True, "cuda"))
    _patch(tensor, "new_tensor", _new_tensor)
    for name in ("tensor", "as_tensor"):
        _patch(torch, name, lambda original: _factory(original, takes_data=True))
    for name in _FACTORIES:
        _patch(torch, name, lambda original: _factory(original, takes_data=False))
    _patch(torch, "from_numpy", lambda original: _factory(original, takes_data=False))
    _patch(torch._C._nn, "cross_entropy_loss", _cross_entropy)
    _patch(torch, "ctc_loss", _ctc_loss)
    # torch/nn/utils/rnn.py: the lengths pad_packed_sequence returns are a CPU tensor
    _patch(torch._VF, "_pad_packed_sequence", _host_results((1,)))


def _uninstall() -> None:
    while _PATCHED:
        owner, name, original, own = _PATCHED.pop()
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def _dispatch_mode(recorder: _Recorder) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    placements = recorder.placements

    class SyncDispatchMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self,
            func: Any,
            types: Iterable[type],
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            if not _innermost(recorder):  # a call checked inside this one records its ops
                return func(*args, **kwargs)
            inputs = _tensors(kwargs.values(), _tensors(args)) if kwargs else _tensors(args)
            if not placements.accelerated:
                for tensor in inputs:
                    if tensor.device.type not in ("cpu", "meta"):
                        placements.accelerated = True
                        if tensor.device.type == "cuda":
                            recorder.arm_cuda()
                        break
            on_device = [t for t in inputs if placements.on_device(t)]
            record = None
            frame = sys._getframe(1)
            name = _NAMES.get(func)
            if name is None:
                name = _NAMES[func] = func._schema.name.split("::")[-1]
            if recorder.depth == 0 and on_device:
                operation = aten_sync(name, func._overloadname, args, kwargs)
                if name in _INDEX_PUT and masked_fill_put(args, kwargs, placements.on_device):
                    operation = None
                if (
                    operation is None
                    and name in _INDEXING
                    and host_index(args, placements.on_device)
                ):
                    operation = "host index"
                if operation is None and name == "copy_" and len(args) > 1:
                    destination, source = (
                        placements.on_device(args[0]),
                        placements.on_device(args[1]),
                    )
                    if destination != source:
                        blocking = not (kwargs.get("non_blocking") or (len(args) > 2 and args[2]))
                        if source:  # into pinned host memory, a non-blocking copy is queued
                            blocking = blocking or not _pinned(args[0])
                            operation = "to(cpu)" if blocking else None
                        else:
                            operation = "to(device)" if blocking else None
                if operation is not None:
                    site = sync_sites.site_of(frame)
                    if operation == "item" and cpu_only_reads(site.callee, site.call):
                        operation = None
                    elif operation == "nonzero" and site.callee.rsplit(".", 1)[-1] == "where":
                        operation = "where(cond)"
                if operation is not None:
                    record = recorder.add(operation, frame, _device_type(on_device[0]))
            before = len(recorder.caught)
            result = func(*args, **kwargs)
            if len(recorder.caught) != before and recorder.depth == 0:
                # inside a wrapped call (.item(), .cpu()...) the wrapper folds them
                recorder.fold(before, record, frame, name)
            if name in _HOST_OUTPUTS:
                outputs = _tensors([result])
                for position in _HOST_OUTPUTS[name]:
                    if position < len(outputs):
                        placements.mark(outputs[position], False)
            if name in ("lift_fresh", "lift_fresh_copy") and recorder.depth == 0:
                # a tensor made from Python values (x[mask] = 0.0): on the host
                for output in _tensors([result]):
                    placements.mark(output, False)
            elif inputs and not on_device:
                # new tensors are on the device unless marked; in-place results keep theirs
                for output in _tensors([result]):
                    if not any(output is t for t in inputs):
                        placements.mark(output, False)
            return result

    return SyncDispatchMode()  # type: ignore[no-untyped-call]


def _roots(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """What the call can reach directly: its arguments, closure, bound object and globals."""
    roots: list[Any] = [fn, *args, *kwargs.values()]
    target = getattr(fn, "__func__", fn)
    roots.append(getattr(fn, "__self__", None))
    for cell in getattr(target, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            roots.append(cell.cell_contents)
    code = getattr(target, "__code__", None)
    names = getattr(target, "__globals__", {})
    if code is not None:
        roots += [names[n] for n in code.co_names if n in names]
    expanded = list(roots)
    for root in roots:
        if isinstance(root, (list, tuple)):
            expanded += list(root)
        elif isinstance(root, dict):
            expanded += list(root.values())
        elif hasattr(root, "__dict__") and not isinstance(root, (type, types.ModuleType)):
            expanded += list(vars(root).values())
    return expanded


def _prepare(recorder: _Recorder, roots: list[Any]) -> None:
    """Placements of what existed before the call.

    The tensors of a dataset or data loader live on the host (batches come out of them
    there); everything else that existed is taken as on the device, module attributes
    included (caches built on ``x.device``, torchmetrics states moved by ``_apply``).
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    seen: set[int] = set()
    for root in roots:
        if isinstance(root, torch.Tensor) and root.device.type not in ("cpu", "meta"):
            recorder.placements.accelerated = True
        dataset = root.dataset if isinstance(root, DataLoader) else root
        if isinstance(dataset, Dataset):
            for tensor in _tensors(vars(dataset).values()):
                recorder.placements.mark(tensor, False)
        if not isinstance(root, torch.nn.Module) or id(root) in seen:
            continue
        for module in root.modules():
            seen.add(id(module))
            for parameter in module.parameters(recurse=False):
                if parameter.device.type not in ("cpu", "meta"):
                    recorder.placements.accelerated = True
                    return


def _step_counters_on_host(recorder: _Recorder) -> Callable[..., None]:
    """An optimizer pre-step hook: step counters live on the host unless capturable/fused."""
    import torch

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _current() is not recorder:
            return
        for group in optimizer.param_groups:
            if group.get("capturable") or group.get("fused"):
                continue
            for parameter in group["params"]:
                step = optimizer.state.get(parameter, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device.type == "cpu":
                    recorder.placements.mark(step, False)

    return hook


def _format_failure(events: list[SyncEvent], allowed: set[str]) -> str:
    count = sum(event.count for event in events)
    lines = [
        f"expected no host-device synchronisation, found {count}"
        f" synchronising operation{'s' if count != 1 else ''}:"
    ]
    for event in events:
        lines.append(f"  {event.describe()}")
        if event.why():
            lines.append(f"      on a GPU: {event.why()}")
        if event.instead():
            lines.append(f"      instead: {event.instead()}")
    if any(event.device == "cpu" for event in events):
        lines.append(
            "Those marked [cpu] ran on the CPU, where they cost nothing extra; on a GPU"
            " each would make the host wait for the device."
        )
    names = tuple(dict.fromkeys(e.operation for e in events))
    lines.append(f"To accept a known one: allow={names!r}.")
    if allowed:
        lines.append(f"(allowed: {', '.join(sorted(allowed))})")
    return "\n".join(lines)


def _validate_allow(allow: Iterable[str] | str) -> set[str]:
    if isinstance(allow, str):
        names = {allow}
    else:
        try:
            names = set(allow)
        except TypeError:
            raise TypeError(
                f"assert_no_host_sync: allow= takes operation names (a string or a list of"
                f" them), got {type(allow).__name__}; expected names from:"
                f" {', '.join(SYNC_OPERATIONS)}"
            ) from None
    wrong = sorted(repr(n) for n in names if not isinstance(n, str))
    if wrong:
        raise TypeError(
            f"assert_no_host_sync: allow= takes operation names, got {', '.join(wrong)};"
            f" expected names from: {', '.join(SYNC_OPERATIONS)}"
        )
    unknown = names - set(SYNC_OPERATIONS)
    if unknown:
        raise ValueError(
            f"assert_no_host_sync: unknown operation(s) in allow=: {sorted(unknown)};"
            f" expected names from: {', '.join(SYNC_OPERATIONS)}"
        )
    return names


def find_host_syncs(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[Any, list[SyncEvent]]:
    """Run ``fn(*args, **kwargs)``; return its result and what would sync on a GPU."""
    with _CALLS:
        return _find_host_syncs(fn, args, kwargs)


def _find_host_syncs(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, list[SyncEvent]]:
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    recorder = _Recorder()
    _prepare(recorder, _roots(fn, args, kwargs))
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        recorder.arm_cuda()
    hook = register_optimizer_step_pre_hook(_step_counters_on_host(recorder))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            recorder.caught = caught
            with _LOCK:
                if not _ACTIVE:
                    _install()
                _ACTIVE.setdefault(recorder.thread, []).append(recorder)
            try:
                with _dispatch_mode(recorder):
                    result = fn(*args, **kwargs)
            finally:
                with _LOCK:
                    stack = _ACTIVE[recorder.thread]
                    stack.remove(recorder)
                    if not stack:
                        del _ACTIVE[recorder.thread]
                    if not _ACTIVE:
                        _uninstall()
    finally:
        hook.remove()
        if recorder.cuda_mode is not None:
            torch.cuda.set_sync_debug_mode(recorder.cuda_mode)
    for warning in recorder.caught:
        if _is_sync_warning(warning):
            record = _Pending(
                "cuda sync",
                sync_sites.Site(warning.filename, warning.lineno, "", None),
                "cuda",
                confirmed=True,
            )
            recorder.pending.append(record)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return result, recorder.events()


def assert_no_host_sync(
    fn: Callable[..., Any], *args: Any, allow: Iterable[str] | str = (), **kwargs: Any
) -> Any:
    """Run ``fn(*args, **kwargs)`` and fail if it would make the host wait for a GPU.

    Lists every synchronising operation with the line of your code that led to it, why
    it waits on a GPU and the sync-free spelling. On CPU it reports what would
    synchronise if the tensors lived on a GPU. ``allow`` accepts known ones by name
    (``allow=("item",)``); see ``SYNC_OPERATIONS``. Returns what ``fn`` returned.
    """
    __tracebackhide__ = True
    allowed = _validate_allow(allow)
    result, events = find_host_syncs(fn, *args, **kwargs)
    reported = [event for event in events if event.operation not in allowed]
    if reported:
        raise AssertionError(_format_failure(reported, allowed))
    return result
