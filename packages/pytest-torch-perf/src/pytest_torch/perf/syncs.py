"""Finding the operations that make the host wait for the device.

``.item()``, ``if tensor:``, ``.cpu()``, ``nonzero`` and friends stall the host until
the accelerator has finished everything queued before them, which serialises host
and device. They are found with torch's function and dispatch modes, which see them
on every device — so a CPU-only CI run catches the operations that *would*
synchronise on a GPU. On CUDA the backend's own sync check is armed as well.
"""

from __future__ import annotations

import linecache
import os
import sys
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: Operation names a user can pass to ``allow=``, with what each one is.
SYNC_OPERATIONS: dict[str, str] = {
    "item": "Tensor.item() copies a value to the host",
    "bool": "bool(tensor) / `if tensor:` reads the value on the host",
    "float": "float(tensor) reads the value on the host",
    "int": "int(tensor) / using a tensor as an index reads the value on the host",
    "cpu": "Tensor.cpu() copies to the host",
    "to(cpu)": "Tensor.to('cpu') copies to the host",
    "tolist": "Tensor.tolist() copies to the host",
    "numpy": "Tensor.numpy() copies to the host",
    "equal": "torch.equal returns a Python bool",
    "allclose": "torch.allclose returns a Python bool",
    "nonzero": "nonzero/argwhere: the output shape depends on the data",
    "where(cond)": "torch.where with one argument is nonzero: data-dependent shape",
    "masked_select": "masked_select: the output shape depends on the data",
    "boolean mask indexing": "x[mask]: the output shape depends on the data",
    "unique": "unique: the output shape depends on the data",
    "repeat_interleave": "repeat_interleave with tensor repeats and no output_size",
    "bincount": "bincount: the output size depends on the data",
    "cuda sync": "an operation the CUDA backend reported as synchronizing",
}

#: aten ops (by schema name) that synchronise, seen below the Python API
_DISPATCH_SYNCS: dict[str, str] = {
    "_local_scalar_dense": "item",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "_unique": "unique",
    "_unique2": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique",
    "equal": "equal",
    "bincount": "bincount",
}

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class SyncEvent:
    """One synchronising operation, where the user's code performed it."""

    operation: str
    filename: str
    lineno: int
    source: str
    #: device type of the tensor it ran on ("" when unknown)
    device: str = ""

    def describe(self) -> str:
        where = f"{_shown_path(self.filename)}:{self.lineno}"
        code = f"  {self.source}" if self.source else ""
        on = f" [{self.device}]" if self.device else ""
        return f"{self.operation}{on} at {where}{code}"


def _shown_path(filename: str) -> str:
    """Relative to the working directory when below it, as pytest shows paths."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if relative.startswith("..") else relative


def _is_internal(filename: str) -> bool:
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    path = os.path.abspath(filename)
    return path.startswith((torch_dir + os.sep, _PACKAGE_DIR + os.sep)) or filename.startswith("<")


def _user_frame(start: FrameType | None) -> FrameType | None:
    frame = start
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _device_of(args: tuple[Any, ...]) -> str:
    import torch

    for value in args:
        if isinstance(value, torch.Tensor):
            return value.device.type
    return ""


def _event(operation: str, args: tuple[Any, ...]) -> SyncEvent:
    frame = _user_frame(sys._getframe(1))
    if frame is None:
        return SyncEvent(operation, "<unknown>", 0, "", _device_of(args))
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(filename, lineno).strip()
    return SyncEvent(operation, filename, lineno, source, _device_of(args))


def _is_cpu_target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    import torch

    candidates = [kwargs.get("device"), *args[1:2]]
    for value in candidates:
        if isinstance(value, str) and value.split(":")[0] == "cpu":
            return True
        if isinstance(value, torch.device) and value.type == "cpu":
            return True
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            return True
    return False


def _has_bool_index(index: Any) -> bool:
    import torch

    items = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(item, torch.Tensor) and item.dtype in (torch.bool, torch.uint8) for item in items
    )


def _classify(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The operation name of a torch function call that synchronises, else None."""
    method = name.rsplit(".", 1)[-1]
    simple = {
        "item": "item",
        "__bool__": "bool",
        "__float__": "float",
        "__int__": "int",
        "__index__": "int",
        "cpu": "cpu",
        "tolist": "tolist",
        "numpy": "numpy",
        "equal": "equal",
        "allclose": "allclose",
        "nonzero": "nonzero",
        "argwhere": "nonzero",
        "masked_select": "masked_select",
        "unique": "unique",
        "unique_consecutive": "unique",
        "bincount": "bincount",
    }
    if method in simple:
        return simple[method]
    if method == "to" and _is_cpu_target(args, kwargs):
        return "to(cpu)"
    if method == "where" and len(args) + len(kwargs) == 1:
        return "where(cond)"
    if method == "__getitem__" and len(args) > 1 and _has_bool_index(args[1]):
        return "boolean mask indexing"
    if method == "repeat_interleave" and "output_size" not in kwargs:
        import torch

        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        if isinstance(repeats, torch.Tensor):
            return "repeat_interleave"
    return None


class _Recorder:
    """Function and dispatch modes that record synchronising operations."""

    def __init__(self) -> None:
        from torch.overrides import TorchFunctionMode, resolve_name
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self
        self.events: list[SyncEvent] = []
        self.depth = 0  # >0 while a recorded call runs: its inner ops are not new events

        class FunctionMode(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Callable[..., Any],
                types: Iterable[type],
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                kwargs = kwargs or {}
                operation = None
                if recorder.depth == 0:
                    operation = _classify(
                        resolve_name(func) or getattr(func, "__name__", ""), args, kwargs
                    )
                if operation is None:
                    return func(*args, **kwargs)
                recorder.events.append(_event(operation, args))
                recorder.depth += 1
                try:
                    return func(*args, **kwargs)
                finally:
                    recorder.depth -= 1

        # Catches what the Python API does not show: ops called from C++.
        class DispatchMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __torch_dispatch__(
                self,
                func: Any,
                types: Iterable[type],
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                if recorder.depth == 0:
                    name = func._schema.name.split("::")[-1]
                    if name in _DISPATCH_SYNCS:
                        recorder.events.append(_event(_DISPATCH_SYNCS[name], args))
                return func(*args, **(kwargs or {}))

        self.modes = (FunctionMode(), DispatchMode())  # type: ignore[no-untyped-call]


def _format_failure(events: list[SyncEvent], allowed: set[str]) -> str:
    lines = [
        f"expected no host-device synchronisation, found {len(events)}"
        f" synchronising operation{'s' if len(events) != 1 else ''}:"
    ]
    lines += [f"  {event.describe()}" for event in events]
    if any(event.device == "cpu" for event in events):
        lines.append(
            "Those marked [cpu] ran on the CPU, where they cost nothing extra; on a GPU"
            " each would make the host wait for the device."
        )
    lines.append(
        "Keep values on the device (torch.where instead of `if`, masks instead of"
        " indexing with a boolean tensor, return tensors instead of .item()), or accept a"
        " known one with allow=(" + ", ".join(repr(e.operation) for e in events[:2]) + ")."
    )
    if allowed:
        lines.append(f"(allowed: {', '.join(sorted(allowed))})")
    return "\n".join(lines)


def _validate_allow(allow: Iterable[str] | str) -> set[str]:
    names = {allow} if isinstance(allow, str) else set(allow)
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
    """Run ``fn(*args, **kwargs)``; return its result and every synchronising operation."""
    import torch

    recorder = _Recorder()
    cuda_mode = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        cuda_mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with recorder.modes[0], recorder.modes[1]:
                result = fn(*args, **kwargs)
    finally:
        if cuda_mode is not None:
            torch.cuda.set_sync_debug_mode(cuda_mode)
    events = list(recorder.events)
    for warning in caught:
        if "synchronizing" in str(warning.message).lower():
            if not any(
                e.filename == warning.filename and e.lineno == warning.lineno for e in events
            ):
                source = linecache.getline(warning.filename, warning.lineno).strip()
                events.append(SyncEvent("cuda sync", warning.filename, warning.lineno, source))
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return result, events


def assert_no_host_sync(
    fn: Callable[..., Any], *args: Any, allow: Iterable[str] | str = (), **kwargs: Any
) -> Any:
    """Run ``fn(*args, **kwargs)`` and fail if it makes the host wait for the device.

    Lists every synchronising operation with the line of your code that performed it.
    On CPU it reports the operations that would synchronise on an accelerator.
    ``allow`` accepts known ones by name (``allow=("item",)``); see ``SYNC_OPERATIONS``.
    Returns what ``fn`` returned.
    """
    __tracebackhide__ = True
    allowed = _validate_allow(allow)
    result, events = find_host_syncs(fn, *args, **kwargs)
    reported = [event for event in events if event.operation not in allowed]
    if reported:
        raise AssertionError(_format_failure(reported, allowed))
    return result
