"""A test-only accelerator for the pytest-torch family's own test suite: ``emu``.

This is torch's PrivateUse1 backend renamed ``emu``, with two devices (``emu:0`` and
``emu:1``; ``$PYTEST_TORCH_EMULATOR_DEVICES`` changes the count) of 8 GiB each
(``$PYTEST_TORCH_EMULATOR_MEMORY_MIB`` changes it). Memory is plain host memory and
every kernel runs on the CPU, but the device-generic machinery is real: torch reports
``emu`` as the current accelerator, tensors live on a device and move between devices
and the CPU, the ``torch.accelerator`` memory statistics count every byte per device,
an allocation beyond the per-process memory fraction raises ``torch.OutOfMemoryError``,
each device has its own random generator (``torch.emu.manual_seed`` and the rng-state
functions), pinned memory is told apart from pageable memory, each thread has its own
current device, and autocast works for the common matmul and convolution ops.

Where it differs from CUDA, on purpose:

* the allocator neither rounds (CUDA rounds to 512 bytes) nor caches: allocated,
  reserved, active and requested bytes are all the same exact figure, and freeing a
  tensor returns its memory at once;
* kernels are synchronous and each device has one stream, the default one; there is
  no ``Event``, ``Stream`` or ``current_stream`` here, so timing code measures wall
  time, which is exact when nothing is asynchronous;
* there is no cuBLAS, cuDNN or NCCL: results are the CPU's, and the ``gloo`` process
  group does not take ``emu`` tensors (distributed tests use CPU tensors with gloo).

The build folder made by ``tests/emulator/build.py`` installs this file as the package
``pytest_torch_emulator``, beside its compiled ``_C`` extension, with a
``torch.backends`` entry point to ``autoload``: a process with that folder on its path
loads the emulator at ``import torch``. ``load()`` does the same explicitly and is
idempotent.
"""

from __future__ import annotations

import importlib
import os
import threading
import types
from dataclasses import dataclass
from typing import Any

__all__ = ["DEVICE_NAME", "DEVICE_TYPE", "autoload", "load"]

DEVICE_TYPE = "emu"
DEVICE_NAME = "pytest-torch emulated accelerator"

_ENVIRONMENT_LIMITS = {
    "PYTEST_TORCH_EMULATOR_DEVICES": (0, 64),
    "PYTEST_TORCH_EMULATOR_MEMORY_MIB": (1, 2**30),
}

_load_lock = threading.Lock()
_device_module: types.ModuleType | None = None
_native: Any = None  # the compiled extension, pytest_torch_emulator._C, once loaded


def autoload() -> None:
    """The ``torch.backends`` entry point: torch calls it while it is being imported."""
    load()


def load() -> types.ModuleType:
    """Register the ``emu`` device with torch (once) and return ``torch.emu``."""
    global _device_module, _native
    with _load_lock:
        if _device_module is not None:
            return _device_module
        _check_environment()
        import torch
        from torch.utils.backend_registration import (
            generate_methods_for_privateuse1_backend,
            rename_privateuse1_backend,
        )

        backend_name = torch._C._get_privateuse1_backend_name()
        if backend_name not in ("privateuseone", DEVICE_TYPE):
            raise RuntimeError(
                f"cannot load the emulated accelerator: torch's PrivateUse1 backend is "
                f"already taken by {backend_name!r}"
            )
        # Importing the extension registers the backend's C++ parts with torch.
        _native = importlib.import_module(f"{__name__}._C")
        if backend_name != DEVICE_TYPE:
            rename_privateuse1_backend(DEVICE_TYPE)
        module = _make_device_module()
        if not hasattr(torch, DEVICE_TYPE):
            torch._register_device_module(DEVICE_TYPE, module)  # type: ignore[no-untyped-call]
        generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
        _device_module = module
        return module


def _check_environment() -> None:
    """Reject bad settings here, with a message, rather than letting C++ fall back."""
    for name, (low, high) in _ENVIRONMENT_LIMITS.items():
        text = os.environ.get(name, "")
        if not text:
            continue
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise ValueError(f"${name} must be an integer from {low} to {high}, not {text!r}")


# --- the device module, torch.emu ------------------------------------------------


def _index(device: Any = None) -> int:
    """A device index from None (the current device), an int, a string or a torch.device."""
    import torch

    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_TYPE:
            raise ValueError(f"expected an {DEVICE_TYPE} device, got {device}")
        index = -1 if device.index is None else device.index
    elif isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        raise TypeError(f"expected a device, an index or None, got {type(device).__name__}")
    if index == -1:
        return current_device()
    if not 0 <= index < device_count():
        raise ValueError(
            f"invalid {DEVICE_TYPE} device index {index} "
            f"(this process has {device_count()} emulated devices)"
        )
    return index


def is_available() -> bool:
    """Whether there is at least one emulated device."""
    return device_count() > 0


def is_initialized() -> bool:
    """Whether the emulator is loaded (it initializes when it loads)."""
    return _device_module is not None


def _is_in_bad_fork() -> bool:
    # Nothing is lost across fork: the devices are host memory.
    return False


def device_count() -> int:
    return int(_native.device_count())


def current_device() -> int:
    """This thread's current device; every thread starts at 0, as with CUDA."""
    return int(_native.current_device())


def set_device(device: Any) -> None:
    """Set this thread's current device (a negative index is ignored, as with CUDA)."""
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        return
    _native.set_device(_index(device))


class device:
    """Context manager that makes a device current and restores the previous one."""

    def __init__(self, device: Any) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _native.current_device()
        if self.index >= 0:
            _native.set_device(self.index)

    def __exit__(self, *exc_info: object) -> None:
        _native.set_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Nothing to wait for: kernels finish before they return."""
    _index(device)


def get_device_name(device: Any = None) -> str:
    _index(device)
    return DEVICE_NAME


@dataclass(frozen=True)
class _DeviceProperties:
    name: str
    total_memory: int

    def __repr__(self) -> str:
        return (
            f"_EmuDeviceProperties(name={self.name!r}, total_memory={self.total_memory // 2**20}MB)"
        )


def get_device_properties(device: Any = None) -> _DeviceProperties:
    _index(device)
    return _DeviceProperties(DEVICE_NAME, int(_native.total_memory()))


def get_amp_supported_dtype() -> list[Any]:
    import torch

    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# Memory: the statistics are torch's own, read through torch.accelerator.


def memory_stats(device: Any = None) -> dict[str, Any]:
    import torch

    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: Any = None) -> int:
    import torch

    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    import torch

    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    import torch

    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    import torch

    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    import torch

    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    import torch

    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of a device: total is the emulated capacity."""
    import torch

    return torch.accelerator.get_memory_info(_index(device))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Cap this process's allocations on a device at ``fraction`` of its total memory."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _native.set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: Any = None) -> float:
    return float(_native.get_memory_fraction(_index(device)))


def empty_cache() -> None:
    """Nothing is cached: freed memory is returned at once."""


# Random numbers: one default generator per device.

default_generators: tuple[Any, ...] = ()


def get_rng_state(device: Any = DEVICE_TYPE) -> Any:
    return default_generators[_index(device)].get_state()


def get_rng_state_all() -> list[Any]:
    return [generator.get_state() for generator in default_generators]


def set_rng_state(new_state: Any, device: Any = DEVICE_TYPE) -> None:
    import torch

    with torch._C._DisableFuncTorch():
        state = new_state.clone(memory_format=torch.contiguous_format)
    default_generators[_index(device)].set_state(state)


def set_rng_state_all(new_states: Any) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a random number."""
    default_generators[current_device()].seed()


def seed_all() -> None:
    """Seed every device's generator with one random number."""
    if default_generators:
        value = default_generators[0].seed()
        for generator in default_generators[1:]:
            generator.manual_seed(value)


def initial_seed() -> int:
    return int(default_generators[current_device()].initial_seed())


_DEVICE_API = (
    "current_device",
    "default_generators",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "synchronize",
    "_is_in_bad_fork",
)


def _make_device_module() -> types.ModuleType:
    global default_generators
    default_generators = tuple(_native.default_generator(i) for i in range(_native.device_count()))
    module = types.ModuleType(f"torch.{DEVICE_TYPE}", __doc__)
    namespace = globals()
    for name in _DEVICE_API:
        setattr(module, name, namespace[name])
    module.__dict__["__all__"] = [name for name in _DEVICE_API if not name.startswith("_")]
    return module
