"""The Python-level reads and moves the dispatcher cannot see (``.item()``, ``if t:``,
``print(t)``, ``.tolist()``, ``.cpu()``, ``.to(...)``, ``torch.tensor(...)``, a few
composites that read on the host only on a GPU), wrapped while a checked call runs and
restored afterwards; and the placement of the tensors they make.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from pytest_torch.perf.syncs import sites
from pytest_torch.perf.syncs.recorder import Recorder, current, device_type, tensors

_PATCHED: list[tuple[Any, str, Any, bool]] = []


def _pins_host_copy(tensor: Any) -> bool:
    """Whether ``tensor.to("cpu", non_blocking=True)`` copies without the host waiting:
    for a strided CUDA tensor, ``_to_copy`` allocates the host copy in pinned memory
    (``pin_out`` in TensorConversions.cpp, torch 2.4 to 2.13) and the copy is queued
    on the stream. A CPU tensor here stands for one on a GPU."""
    import torch

    return device_type(tensor) in ("cuda", "cpu") and tensor.layout == torch.strided


def _read(operation: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """A tensor method that reads the tensor on the host."""

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = current()
        if recorder is None or recorder.depth:
            return original(self, *args, **kwargs)
        frame = sys._getframe(1)
        record = None
        if recorder.placements.on_device(self):
            name = operation
            if operation == "format":
                name = "item" if self.dim() == 0 and type(self).__name__ == "Tensor" else "print"
            record = recorder.add(name, frame, device_type(self))
        return recorder.run(record, frame, "", lambda: original(self, *args, **kwargs))

    return wrapper


def _fresh(result: Any, source: Any) -> Any:
    """A tensor object of its own for a move that a CPU-only run makes in place."""
    return result.view_as(result) if result is source else result


def _move_to(original: Callable[..., Any]) -> Callable[..., Any]:
    """Tensor.to: a copy between host and device syncs; a same-device move does not."""
    import torch

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = current()
        if recorder is None or recorder.depth:
            return original(self, *args, **kwargs)
        spec = kwargs.get("device")
        first = args[0] if args else None
        if isinstance(first, (str, int, torch.device, torch.Tensor)) and first is not True:
            spec = first if first is not False else spec
        frame = sys._getframe(1)
        node = None
        call = sites.call_in(sites.caller_frame(frame))
        if call is not None and sites.dotted(call.func).rsplit(".", 1)[-1] == "to":
            node = sites.argument(call, 0, "device")
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
    recorder: Recorder,
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
                    "cpu" if name == "cpu" else "to(cpu)", frame, device_type(tensor)
                )
        elif not non_blocking:
            record = recorder.add("to(device)", frame, device_type(tensor))
    result = recorder.run(record, frame, name, call)
    if target is not None and target != source:
        result = _fresh(result, tensor)
        recorder.placements.mark(result, target)
    return result


def _moves_to(target: bool, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A tensor method that moves to the device (``.cuda()``) or the host (``.cpu()``)."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            recorder = current()
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


def _values_on_device(recorder: Recorder, data: Any) -> list[Any]:
    import torch

    if isinstance(data, torch.Tensor):
        return []
    return [t for t in tensors([data]) if recorder.placements.on_device(t)]


def _factory(original: Callable[..., Any], takes_data: bool) -> Callable[..., Any]:
    """torch.zeros, torch.tensor...: host tensors unless a device is given."""
    import torch

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recorder = current()
        if recorder is None or recorder.depth:
            return original(*args, **kwargs)
        frame = sys._getframe(1)
        call = sites.call_in(sites.caller_frame(frame))
        spec = kwargs.get("device")
        target = recorder.target(spec, sites.argument(call, 99, "device"))
        data = args[0] if args else kwargs.get("data")
        record = None
        if takes_data:
            on_device = _values_on_device(recorder, data)
            if on_device:
                record = recorder.add("item", frame, device_type(on_device[0]))
            elif isinstance(data, torch.Tensor):
                source = recorder.placements.on_device(data)
                if target is None:
                    target = source
                elif target and not source:
                    record = recorder.add("to(device)", frame, device_type(data))
                elif source and not target:
                    record = recorder.add("to(cpu)", frame, device_type(data))
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
        recorder = current()
        if recorder is None or recorder.depth:
            return original(self, data, *args, **kwargs)
        frame = sys._getframe(1)
        record = None
        target = recorder.placements.on_device(self)
        if kwargs.get("device") is not None:
            target = bool(recorder.target(kwargs["device"], None))
        if _values_on_device(recorder, data):
            record = recorder.add("item", frame, device_type(self))
        elif target:
            record = recorder.add("to(device)", frame, device_type(self))
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
        recorder = current()
        if (
            recorder is not None
            and not recorder.depth
            and weight is not None
            and label_smoothing > 0
            and reduction == 1  # mean
            and not target.is_floating_point()  # class indices, not probabilities
            and recorder.placements.on_device(weight)
        ):
            recorder.add("masked_select", sys._getframe(1), device_type(weight))
        return original(input, target, weight, reduction, ignore_index, label_smoothing)

    return wrapper


def _ctc_loss(original: Callable[..., Any]) -> Callable[..., Any]:
    """CTC with lengths given as device tensors copies them to the host.

    aten/src/ATen/native/LossCTC.cpp ctc_loss (Tensor lengths) does
    ``input_lengths.to(Device(kCPU), kLong)`` — a no-op on a CPU run, so never dispatched.
    """

    def wrapper(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        recorder = current()
        if recorder is not None and not recorder.depth:
            lengths = [t for t in (input_lengths, target_lengths) if _is_tensor(t)]
            on_device = [t for t in lengths if recorder.placements.on_device(t)]
            if on_device:
                recorder.add("to(cpu)", sys._getframe(1), device_type(on_device[0]))
        return original(log_probs, targets, input_lengths, target_lengths, *args, **kwargs)

    return wrapper


def _host_results(positions: tuple[int, ...]) -> Callable[[Any], Callable[..., Any]]:
    """A function whose results at ``positions`` live on the host by design."""

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            recorder = current()
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


def install() -> None:
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


def uninstall() -> None:
    while _PATCHED:
        owner, name, original, own = _PATCHED.pop()
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)
