"""The one device layer of the family.

Every question about a device — is it here, how many, wait for it, how much memory
does it hold — goes through this module, so the rest of the family never branches on
device type names. CPU is a device like any other. Where torch can answer
(``torch.accelerator``, ``torch.get_device_module``) it is asked, so any backend torch
supports — CUDA, Intel XPU, Apple MPS, a ``PrivateUse1`` backend — goes through the
same code; the per-backend modules are the fallback for older torch.

Asking never initialises an accelerator: a CPU-only test on a GPU machine costs no
context. torch is imported inside the functions: importing this module is free.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core.cpus import cpu_model
from pytest_torch.core.units import MIB

if TYPE_CHECKING:
    import torch

#: The accelerator types the family names without asking torch (the one list of them).
ACCELERATOR_TYPES: tuple[str, ...] = ("cuda", "xpu", "mps")
#: Every device type it names, in the order they are listed and parametrized. torch's
#: current accelerator joins them when it is another type (:func:`device_types`).
KNOWN_DEVICE_TYPES: tuple[str, ...] = ("cpu", *ACCELERATOR_TYPES)


class DeviceSpecError(ValueError):
    """A device list or device type that the family cannot use."""


def parse_device_types(value: str | Iterable[str], *, source: str) -> list[str] | None:
    """Parse a device selection such as ``"cpu,cuda"``.

    Returns the device types in canonical order without duplicates, or ``None`` for
    ``"all"``/``"auto"``/empty (every available device). Needs no torch unless a name
    outside :data:`KNOWN_DEVICE_TYPES` is given (torch's own accelerator, say ``hpu``).
    ``source`` names where the value came from, for the error message.
    """
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(item).strip().lower() for item in items]
    names = [name for name in names if name]
    if not names or names in (["all"], ["auto"]):
        return None
    order = KNOWN_DEVICE_TYPES
    if any(name not in order for name in names):
        order = device_types()
    unknown = [name for name in names if name not in order]
    if unknown:
        hint = ""
        if any(":" in name for name in unknown):
            hint = (
                " Give device types, not indices: which GPU a test runs on is chosen"
                " per worker (see --torch-xdist-gpus)."
            )
        raise DeviceSpecError(
            f"{source}: unknown device type {', '.join(repr(n) for n in unknown)}; expected a"
            f" comma-separated list of {', '.join(order)}, or 'all'.{hint}"
        )
    return [t for t in order if t in names]


def _torch() -> ModuleType:
    import torch

    return torch


def _accelerator_api() -> Any:
    """``torch.accelerator`` where the installed torch has it (2.6+), else None."""
    accel = getattr(_torch(), "accelerator", None)
    return accel if hasattr(accel, "current_accelerator") else None


@functools.cache  # the build's accelerator type does not change within a process
def current_accelerator_type() -> str | None:
    """The accelerator type torch was built for (``cuda``, ``xpu``, ``mps``, a
    PrivateUse1 backend's name...), whether or not a device is present; None when torch
    has no accelerator API or no accelerator."""
    accel = _accelerator_api()
    if accel is None:
        return None
    try:
        current = accel.current_accelerator()
    except Exception:  # a broken driver: no accelerator, not a crash
        return None
    return None if current is None else str(current.type)


def accelerator_types() -> tuple[str, ...]:
    """The accelerator types the family asks about: the known ones, and torch's current
    accelerator where it is another type."""
    current = current_accelerator_type()
    if current is None or current in ACCELERATOR_TYPES:
        return ACCELERATOR_TYPES
    return (*ACCELERATOR_TYPES, current)


def device_types() -> tuple[str, ...]:
    """Every device type the family asks about, cpu first."""
    return ("cpu", *accelerator_types())


def backend_module(device_type: str) -> ModuleType | None:
    """The module of an accelerator type (``torch.cuda``, ``torch.mps``, a PrivateUse1
    backend's module), or None (cpu, unknown types)."""
    if device_type == "cpu" or device_type not in accelerator_types():
        return None
    torch = _torch()
    get_module = getattr(torch, "get_device_module", None)
    module: object = None
    if callable(get_module):
        try:
            module = get_module(device_type)
        except Exception:  # a type this build does not know
            module = None
    if module is None:
        module = getattr(torch, device_type, None)
    return module if isinstance(module, ModuleType) else None


def _uses_torch_accelerator(device_type: str) -> bool:
    """True when ``torch.accelerator`` is present and speaks for this device type."""
    return _accelerator_api() is not None and current_accelerator_type() == device_type


def _index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else 0


def _takes_device(func: Callable[..., Any]) -> bool:
    """Whether a backend function takes a device argument (``torch.mps``'s do not)."""
    try:
        return len(inspect.signature(func).parameters) > 0
    except (TypeError, ValueError):  # a builtin without a signature: the CUDA-style call
        return True


def is_available(device_type: str) -> bool:
    """Whether this process can run tensors on ``device_type``."""
    if device_type == "cpu":
        return True
    module = backend_module(device_type)
    try:
        if _uses_torch_accelerator(device_type):
            return bool(_torch().accelerator.is_available())
        return module is not None and bool(module.is_available())
    except Exception:  # a broken driver is "not available", not a crash
        return False


def available_device_types() -> list[str]:
    """Available device types: cpu first, then each available accelerator."""
    return [t for t in device_types() if is_available(t)]


def is_initialized(device_type: str) -> bool:
    """Whether this process has already set up the accelerator (cpu: always).

    Asking never initializes it, so a CPU-only test on a GPU machine costs no context.
    """
    if device_type == "cpu":
        return True
    module = backend_module(device_type)
    check = getattr(module, "is_initialized", None)
    if callable(check):
        return bool(check())
    return is_available(device_type)  # mps and others have no separate set-up step


def device_count(device_type: str) -> int:
    """How many devices of this type the process sees (cpu: 1). Never initialises."""
    if device_type == "cpu":
        return 1
    if not is_available(device_type):
        return 0
    if _uses_torch_accelerator(device_type):
        return int(_torch().accelerator.device_count())
    count = getattr(backend_module(device_type), "device_count", None)
    return int(count()) if callable(count) else 1


def as_device(device: torch.device | str) -> torch.device:
    """``torch.device`` from a device or a string such as ``"cuda:1"``."""
    import torch

    return device if isinstance(device, torch.device) else torch.device(device)


def default_device(device_type: str) -> torch.device:
    """The concrete device a bare type means in this process (``cuda`` -> ``cuda:N``).

    Before the accelerator is initialised its current device is the first visible one
    (choosing another initialises it), so this never initialises it to find out."""
    import torch

    if device_type == "cpu":
        return torch.device("cpu")
    if device_type == "mps" or not is_available(device_type):
        return torch.device(device_type)
    if not is_initialized(device_type):
        return torch.device(device_type, 0)
    if _uses_torch_accelerator(device_type):
        return torch.device(device_type, int(torch.accelerator.current_device_index()))
    current = getattr(backend_module(device_type), "current_device", None)
    return torch.device(device_type, int(current()) if callable(current) else 0)


def synchronize(device: torch.device | str) -> None:
    """Wait until every kernel queued on ``device`` has finished. No-op on CPU."""
    dev = as_device(device)
    if dev.type == "cpu":
        return
    if _uses_torch_accelerator(dev.type):
        _torch().accelerator.synchronize(dev)
        return
    module = backend_module(dev.type)
    sync = getattr(module, "synchronize", None)
    if not callable(sync):
        raise DeviceSpecError(f"cannot synchronize unknown device {dev}")
    if _takes_device(sync):
        sync(dev)
    else:
        sync()


def set_current_device(device: torch.device | str) -> None:
    """Make ``device`` (e.g. ``cuda:1``) the current one of its type in this process, so
    work on a bare ``"cuda"`` goes there. No-op for cpu and mps. Initialises the
    accelerator."""
    dev = as_device(device)
    module = backend_module(dev.type)
    setter = getattr(module, "set_device", None)
    if dev.type in ("cpu", "mps") or dev.index is None or not callable(setter):
        return
    setter(dev.index)


def set_memory_fraction(device: torch.device | str, fraction: float) -> None:
    """Cap this process's allocations on ``device`` at ``fraction`` of its memory."""
    dev = as_device(device)
    module = backend_module(dev.type)
    setter = getattr(module, "set_per_process_memory_fraction", None)
    if not callable(setter):
        raise DeviceSpecError(f"{dev.type} has no per-process memory fraction in this torch")
    if len(_parameters(setter)) > 1:
        setter(fraction, _index(dev))
    else:  # torch.mps: one process-wide fraction
        setter(fraction)


def memory_fraction(device: torch.device | str) -> float | None:
    """The per-process memory fraction in force on ``device``; None where torch cannot
    say (the cap is then assumed to be 1.0, torch's default)."""
    dev = as_device(device)
    getter = getattr(backend_module(dev.type), "get_per_process_memory_fraction", None)
    if not callable(getter) or not is_initialized(dev.type):
        return None
    try:
        return float(getter(_index(dev)) if _takes_device(getter) else getter())
    except Exception:
        return None


def _parameters(func: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return ["fraction", "device"]


def device_name(device: torch.device | str) -> str:
    """A readable hardware name: the CPU model, or the accelerator's product name."""
    dev = as_device(device)
    if dev.type == "cpu":
        return cpu_model()
    module = backend_module(dev.type)
    get_name = getattr(module, "get_device_name", None)
    if callable(get_name):
        return str(get_name(_index(dev)) if _takes_device(get_name) else get_name())
    return dev.type.upper()


def total_memory(device: torch.device | str) -> int | None:
    """Total memory of an accelerator in bytes, or None where it is not reported."""
    dev = as_device(device)
    module = backend_module(dev.type)
    if module is None:
        return None
    recommended = getattr(module, "recommended_max_memory", None)
    if callable(recommended):  # mps: what the system lets the GPU use
        return int(recommended())
    properties = getattr(module, "get_device_properties", None)
    memory = (
        getattr(properties(_index(dev)), "total_memory", None) if callable(properties) else None
    )
    return None if memory is None else int(memory)


def compute_capability(device: torch.device | str) -> str | None:
    """``"9.0"`` for CUDA devices (and others that report one), else None."""
    dev = as_device(device)
    module = backend_module(dev.type)
    get_cap = getattr(module, "get_device_capability", None)
    if module is None or dev.type == "mps" or not callable(get_cap):
        return None
    try:
        cap = get_cap(_index(dev))
    except Exception:
        return None
    if isinstance(cap, Sequence) and len(cap) == 2:
        return f"{cap[0]}.{cap[1]}"
    return None


class MemoryStats(NamedTuple):
    """Memory held by torch's allocator on one device, in bytes."""

    device: str
    allocated: int
    peak: int | None

    @property
    def allocated_mb(self) -> float:
        return self.allocated / MIB

    @property
    def peak_mb(self) -> float | None:
        return None if self.peak is None else self.peak / MIB


def _memory_function(device_type: str, name: str) -> Any:
    if _uses_torch_accelerator(device_type):
        memory = getattr(_torch().accelerator, "memory", None)
        func = getattr(memory, name, None) or getattr(_torch().accelerator, name, None)
        if callable(func):
            return func
    module = backend_module(device_type)
    return getattr(module, name, None)


def memory_stats(device: torch.device | str) -> MemoryStats | None:
    """Allocated and peak bytes on ``device``, or None where the device does not report.

    Accelerators report through ``torch.accelerator`` (or their backend module on older
    torch). The CPU has no running counters: measure CPU peaks with
    :class:`pytest_torch.core.peaks.PeakTracker`, which works for every device.
    """
    dev = as_device(device)
    if dev.type == "cpu" or not is_available(dev.type):
        return None
    if dev.type == "mps":
        current = getattr(backend_module("mps"), "current_allocated_memory", None)
        if not callable(current):
            return None
        return MemoryStats(str(dev), int(current()), None)
    allocated = _memory_function(dev.type, "memory_allocated")
    peak = _memory_function(dev.type, "max_memory_allocated")
    if not callable(allocated):
        return None
    peak_value = int(peak(dev)) if callable(peak) else None
    return MemoryStats(str(dev), int(allocated(dev)), peak_value)


def reset_peak_memory(device: torch.device | str) -> bool:
    """Start a new peak-memory window on ``device``; False where peaks are not tracked."""
    dev = as_device(device)
    if dev.type in ("cpu", "mps") or not is_available(dev.type):
        return False
    reset = _memory_function(dev.type, "reset_peak_memory_stats")
    if not callable(reset):
        return False
    reset(dev)
    return True


class Stopwatch:
    """Times work queued on one device: ``start()``, run the work, ``stop()`` -> seconds.

    Accelerators with timing events and streams (CUDA, XPU) are timed with events on the
    current stream, so the figure is the device's time for the work; elsewhere the
    device is synchronized before and after and the host clock is read.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = as_device(device)
        module = backend_module(self.device.type)
        event = getattr(module, "Event", None)
        self._events = (
            callable(event)
            and callable(getattr(module, "current_stream", None))
            and is_available(self.device.type)
        )
        self._module = module
        self._start: Any = None
        self._end: Any = None
        self._t0 = 0.0

    @property
    def uses_events(self) -> bool:
        return bool(self._events)

    def start(self) -> None:
        if self._events:
            assert self._module is not None
            stream = self._module.current_stream(self.device)
            self._start = self._module.Event(enable_timing=True)
            self._end = self._module.Event(enable_timing=True)
            self._start.record(stream)
        else:
            synchronize(self.device)
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._events:
            assert self._module is not None
            self._end.record(self._module.current_stream(self.device))
            self._end.synchronize()
            return float(self._start.elapsed_time(self._end)) / 1e3
        synchronize(self.device)
        return time.perf_counter() - self._t0


#: the collective backend a device type uses when torch's own map does not say
_COLLECTIVE_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "mps": "gloo"}


def collective_backend(device_type: str) -> str:
    """The ``torch.distributed`` backend for tensors on ``device_type``: torch's own
    default map where it has one (gloo for cpu, nccl for cuda, xccl for xpu), else
    gloo."""
    import torch.distributed as dist

    backends = getattr(getattr(dist, "Backend", None), "default_device_backend_map", None) or {}
    return str(backends.get(device_type) or _COLLECTIVE_BACKENDS.get(device_type, "gloo"))


def collective_backend_available(backend: str) -> bool:
    """Whether this torch build can create process groups with ``backend``."""
    import torch.distributed as dist

    if not dist.is_available():
        return False
    check = getattr(dist, "is_backend_available", None)
    if callable(check):
        return bool(check(backend))
    probe = getattr(dist, f"is_{backend}_available", None)
    return bool(probe()) if callable(probe) else False
