"""The dispatch mode that sees every aten operation of a checked call, including those
inside composite ops, and judges each with ``rules``: host reads, data-dependent
shapes, the checks CUDA kernels make on the host, copies between host and device; and
where the tensors it makes would live on a GPU run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import FrameType
from typing import Any

from pytest_torch.perf.syncs import sites
from pytest_torch.perf.syncs.recorder import (
    Pending,
    Placements,
    Recorder,
    device_type,
    innermost,
    tensors,
)
from pytest_torch.perf.syncs.rules import aten_sync, cpu_only_reads, host_index, masked_fill_put

_INDEX_PUT = ("index_put_", "index_put", "_index_put_impl_")
_INDEXING = ("index", *_INDEX_PUT)
#: outputs that live on the host by design, by aten op: (position, ...)
_HOST_OUTPUTS = {
    # torch/nn/utils/rnn.py: batch_sizes "should always be a CPU torch.int64 tensor"
    "_pack_padded_sequence": (1,),
}
#: aten op names by op overload
_NAMES: dict[Any, str] = {}


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


def dispatch_mode(recorder: Recorder) -> Any:
    """A dispatch mode that records into ``recorder`` what would sync on a GPU."""
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
            if not innermost(recorder):  # a call checked inside this one records its ops
                return func(*args, **kwargs)
            inputs = tensors(kwargs.values(), tensors(args)) if kwargs else tensors(args)
            if not placements.accelerated:
                _notice_accelerator(recorder, inputs)
            on_device = [t for t in inputs if placements.on_device(t)]
            record = None
            frame = sys._getframe(1)
            name = _NAMES.get(func)
            if name is None:
                name = _NAMES[func] = func._schema.name.split("::")[-1]
            if recorder.depth == 0 and on_device:
                record = _judge(recorder, func, name, args, kwargs, frame, on_device)
            before = len(recorder.caught)
            result = func(*args, **kwargs)
            if len(recorder.caught) != before and recorder.depth == 0:
                # inside a wrapped call (.item(), .cpu()...) the wrapper folds them
                recorder.fold(before, record, frame, name)
            _place_outputs(recorder, name, inputs, on_device, result)
            return result

    return SyncDispatchMode()  # type: ignore[no-untyped-call]


def _notice_accelerator(recorder: Recorder, inputs: list[Any]) -> None:
    """The call runs on an accelerator once an op takes a tensor there (on CUDA, the
    backend's own sync check is armed then)."""
    for tensor in inputs:
        if tensor.device.type not in ("cpu", "meta"):
            recorder.placements.accelerated = True
            if tensor.device.type == "cuda":
                recorder.arm_cuda()
            break


def _judge(
    recorder: Recorder,
    func: Any,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    frame: FrameType,
    on_device: list[Any],
) -> Pending | None:
    """The sync aten op ``name`` performs on device tensors, recorded; None when none."""
    placements = recorder.placements
    operation = aten_sync(name, func._overloadname, args, kwargs)
    if name in _INDEX_PUT and masked_fill_put(args, kwargs, placements.on_device):
        operation = None
    if operation is None and name in _INDEXING and host_index(args, placements.on_device):
        operation = "host index"
    if operation is None and name == "copy_" and len(args) > 1:
        operation = _copy(placements, args, kwargs)
    if operation is not None:
        _, call = sites.locate(frame)
        called = sites.callee(call)
        if operation == "item" and cpu_only_reads(called, call):
            operation = None
        elif operation == "nonzero" and called.rsplit(".", 1)[-1] == "where":
            operation = "where(cond)"
    if operation is None:
        return None
    return recorder.add(operation, frame, device_type(on_device[0]))


def _copy(placements: Placements, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """A ``copy_`` between host and device: a sync unless the copy is queued."""
    destination, source = (
        placements.on_device(args[0]),
        placements.on_device(args[1]),
    )
    if destination == source:
        return None
    blocking = not (kwargs.get("non_blocking") or (len(args) > 2 and args[2]))
    if source:  # into pinned host memory, a non-blocking copy is queued
        blocking = blocking or not _pinned(args[0])
        return "to(cpu)" if blocking else None
    return "to(device)" if blocking else None


def _place_outputs(
    recorder: Recorder, name: str, inputs: list[Any], on_device: list[Any], result: Any
) -> None:
    """Where the op's outputs would live on a GPU run."""
    placements = recorder.placements
    if name in _HOST_OUTPUTS:
        outputs = tensors([result])
        for position in _HOST_OUTPUTS[name]:
            if position < len(outputs):
                placements.mark(outputs[position], False)
    if name in ("lift_fresh", "lift_fresh_copy") and recorder.depth == 0:
        # a tensor made from Python values (x[mask] = 0.0): on the host
        for output in tensors([result]):
            placements.mark(output, False)
    elif inputs and not on_device:
        # new tensors are on the device unless marked; in-place results keep theirs
        for output in tensors([result]):
            if not any(output is t for t in inputs):
                placements.mark(output, False)
