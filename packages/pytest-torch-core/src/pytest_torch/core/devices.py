"""The one device layer of the family.

Every question about a device — is it here, how many, wait for it, how much memory
does it hold — goes through this module, so the rest of the family never branches on
device type names. CPU is a device like any other. Built on ``torch.accelerator``
where the installed torch has it, with the per-backend modules as a fallback.

torch is imported inside the functions: importing this module is free.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

#: Device types the family knows, in the order they are listed and parametrized.
KNOWN_DEVICE_TYPES: tuple[str, ...] = ("cpu", "cuda", "xpu", "mps")
#: The accelerator types among them.
ACCELERATOR_TYPES: tuple[str, ...] = ("cuda", "xpu", "mps")


class DeviceSpecError(ValueError):
    """A device list or device type that the family cannot use."""


def parse_device_types(value: str | Iterable[str], *, source: str) -> list[str] | None:
    """Parse a device selection such as ``"cpu,cuda"``.

    Returns the device types in canonical order without duplicates, or ``None`` for
    ``"all"``/``"auto"``/empty (every available device). Needs no torch.
    ``source`` names where the value came from, for the error message.
    """
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(item).strip().lower() for item in items]
    names = [name for name in names if name]
    if not names or names in (["all"], ["auto"]):
        return None
    unknown = [name for name in names if name not in KNOWN_DEVICE_TYPES]
    if unknown:
        hint = ""
        if any(":" in name for name in unknown):
            hint = (
                " Give device types, not indices: which GPU a test runs on is chosen"
                " per worker (see --torch-xdist-gpus)."
            )
        raise DeviceSpecError(
            f"{source}: unknown device type {', '.join(repr(n) for n in unknown)}; expected a"
            f" comma-separated list of {', '.join(KNOWN_DEVICE_TYPES)}, or 'all'.{hint}"
        )
    return [t for t in KNOWN_DEVICE_TYPES if t in names]


def _torch() -> ModuleType:
    import torch

    return torch


def backend_module(device_type: str) -> ModuleType | None:
    """The ``torch.<type>`` module of an accelerator type, or None (cpu, unknown)."""
    if device_type not in ACCELERATOR_TYPES:
        return None
    module = getattr(_torch(), device_type, None)
    return module if isinstance(module, ModuleType) else None


def _uses_torch_accelerator(device_type: str) -> bool:
    """True when ``torch.accelerator`` is present and speaks for this device type."""
    torch = _torch()
    accel = getattr(torch, "accelerator", None)
    if accel is None or not hasattr(accel, "current_accelerator"):
        return False
    current = accel.current_accelerator()
    return current is not None and current.type == device_type


def is_available(device_type: str) -> bool:
    """Whether this process can run tensors on ``device_type``."""
    if device_type == "cpu":
        return True
    module = backend_module(device_type)
    if module is None:
        return False
    try:
        return bool(module.is_available())
    except Exception:  # a broken driver is "not available", not a crash
        return False


def available_device_types() -> list[str]:
    """Available device types: cpu first, then each available accelerator."""
    return [t for t in KNOWN_DEVICE_TYPES if is_available(t)]


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
    """How many devices of this type the process sees (cpu: 1)."""
    if device_type == "cpu":
        return 1
    if not is_available(device_type):
        return 0
    module = backend_module(device_type)
    count = getattr(module, "device_count", None)
    return int(count()) if callable(count) else 1


def as_device(device: torch.device | str) -> torch.device:
    """``torch.device`` from a device or a string such as ``"cuda:1"``."""
    import torch

    return device if isinstance(device, torch.device) else torch.device(device)


def default_device(device_type: str) -> torch.device:
    """The concrete device a bare type means in this process (``cuda`` -> ``cuda:N``)."""
    import torch

    if device_type == "cpu":
        return torch.device("cpu")
    module = backend_module(device_type)
    current = getattr(module, "current_device", None)
    if device_type != "mps" and callable(current) and is_available(device_type):
        return torch.device(device_type, int(current()))
    return torch.device(device_type)


def synchronize(device: torch.device | str) -> None:
    """Wait until every kernel queued on ``device`` has finished. No-op on CPU."""
    dev = as_device(device)
    if dev.type == "cpu":
        return
    if _uses_torch_accelerator(dev.type):
        _torch().accelerator.synchronize(dev)
        return
    module = backend_module(dev.type)
    if module is None:
        raise DeviceSpecError(f"cannot synchronize unknown device {dev}")
    if dev.type == "mps":
        module.synchronize()
    else:
        module.synchronize(dev)


def set_current_device(device: torch.device | str) -> None:
    """Make ``device`` (e.g. ``cuda:1``) the current one of its type in this process, so
    work on a bare ``"cuda"`` goes there. No-op for cpu and mps."""
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
    setter(fraction, dev.index if dev.index is not None else 0)


def device_name(device: torch.device | str) -> str:
    """A readable hardware name: the CPU model, or the accelerator's product name."""
    dev = as_device(device)
    if dev.type == "cpu":
        from pytest_torch.core.fingerprint import cpu_model

        return cpu_model()
    module = backend_module(dev.type)
    get_name = getattr(module, "get_device_name", None)
    if callable(get_name):
        return str(get_name(dev.index if dev.index is not None else 0))
    return dev.type.upper()


def total_memory(device: torch.device | str) -> int | None:
    """Total memory of an accelerator in bytes, or None where it is not reported."""
    dev = as_device(device)
    module = backend_module(dev.type)
    if module is None:
        return None
    if dev.type == "mps":
        recommended = getattr(module, "recommended_max_memory", None)
        return int(recommended()) if callable(recommended) else None
    props = module.get_device_properties(dev.index if dev.index is not None else 0)
    return int(props.total_memory)


def compute_capability(device: torch.device | str) -> str | None:
    """``"9.0"`` for CUDA devices (and others that report one), else None."""
    dev = as_device(device)
    module = backend_module(dev.type)
    get_cap = getattr(module, "get_device_capability", None)
    if module is None or dev.type == "mps" or not callable(get_cap):
        return None
    try:
        cap = get_cap(dev.index if dev.index is not None else 0)
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
        return self.allocated / 2**20

    @property
    def peak_mb(self) -> float | None:
        return None if self.peak is None else self.peak / 2**20


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
    :class:`pytest_torch.core.memory.PeakTracker`, which works for every device.
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

    Accelerators with timing events (CUDA, XPU) are timed with events on the current
    stream, so the figure is the device's time for the work; elsewhere the device is
    synchronized before and after and the host clock is read.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = as_device(device)
        module = backend_module(self.device.type)
        event = getattr(module, "Event", None)
        self._events = (
            self.device.type in ("cuda", "xpu")
            and callable(event)
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
