"""Where a ``torch_distributed`` test runs: how many ranks, which backend, which device
each rank gets, and how long it may take — or why it cannot run here.

Bad arguments are errors naming the test and the marker, found at collection, before
any rank starts; a machine without enough devices is a skip that says so. Device
questions go through core's device layer.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_torch.core import devices
from pytest_torch.distributed.markers import DISTRIBUTED

#: what one rank costs in memory before the test allocates anything (an interpreter
#: with torch and pytest imported)
RANK_MEMORY_BYTES = 400 * 2**20


@dataclass(frozen=True)
class Plan:
    world_size: int
    backend: str
    device_type: str
    #: each rank's device, "cpu" or e.g. "cuda:1"
    devices: tuple[str, ...]
    timeout: float
    #: why the test cannot run on this machine (it is skipped), or None
    skip: str | None = None

    @property
    def pool_key(self) -> tuple[int, str, tuple[str, ...]]:
        return (self.world_size, self.backend, self.devices)

    def describe(self) -> str:
        shown = self.devices[0] if len(set(self.devices)) == 1 else ", ".join(self.devices)
        text = f"{self.world_size} ranks, {self.backend} on {shown}"
        if self.device_type != "cpu" and self.backend == "gloo":
            text += (
                f" ({self.device_type} has no collective backend of its own in this torch:"
                " gloo takes the CPU tensors)"
            )
        return text


@dataclass(frozen=True)
class Arguments:
    world_size: int
    backend: str | None
    timeout: float | None
    device: tuple[str, ...] | None
    share_devices: bool


def read_arguments(args: Sequence[Any], kwargs: Mapping[str, Any], where: str) -> Arguments:
    """The marker's arguments, checked; ValueError starting with ``where`` (the test id
    and marker) for a bad one."""
    prefix = f"{where}: @pytest.mark.{DISTRIBUTED.name}"
    values = DISTRIBUTED.bind(args, kwargs, prefix)
    world_size = values["world_size"]
    if world_size is None:
        raise ValueError(f"{prefix} needs world_size, the number of ranks. {_EXAMPLE}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(
            f"{prefix}: world_size must be a whole number of ranks, 1 or more; got"
            f" {world_size!r}. {_EXAMPLE}"
        )
    backend = values["backend"]
    if backend is not None and (not isinstance(backend, str) or not backend.strip()):
        raise ValueError(
            f"{prefix}: backend must be a name such as 'gloo' or 'nccl'; got {backend!r}"
        )
    timeout = values["timeout"]
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"{prefix}: timeout must be a positive number of seconds; got {timeout!r}")
    device = values["device"]
    types: tuple[str, ...] | None = None
    if device is not None:
        given = (device,) if isinstance(device, str) else tuple(device)
        try:
            parsed = [devices.parse_device_types(str(d), source=f"{prefix}: device") for d in given]
        except devices.DeviceSpecError as exc:
            raise ValueError(str(exc)) from None
        types = tuple(t for p in parsed for t in (p or []))
        if not types:
            raise ValueError(f"{prefix}: device must name device types such as 'cpu' or 'cuda'")
    return Arguments(world_size, backend, timeout, types, bool(values["share_devices"]))


_EXAMPLE = f"Example: {DISTRIBUTED.example}"


def check_machine(arguments: Arguments, where: str) -> None:
    """ValueError when this machine cannot hold the ranks or the backend is not built."""
    prefix = f"{where}: @pytest.mark.{DISTRIBUTED.name}"
    missing = [
        name
        for name in _backend_names(arguments.backend or "")
        if name and not devices.collective_backend_available(name)
    ]
    if missing:
        import torch

        raise ValueError(
            f"{prefix}: backend {missing[0]!r} is not available in this torch build"
            f" ({torch.__version__}); leave backend unset to use the device's default"
            f" (gloo on cpu), or install a torch build with {missing[0]}."
        )
    available = available_memory()
    if available is not None and arguments.world_size * RANK_MEMORY_BYTES > available:
        most = max(1, available // RANK_MEMORY_BYTES)
        raise ValueError(
            f"{prefix}: world_size={arguments.world_size} needs about"
            f" {arguments.world_size * RANK_MEMORY_BYTES / 2**30:.1f} GiB for the ranks'"
            f" processes alone; this machine has {available / 2**30:.1f} GiB available, room"
            f" for about {most} ranks. Use fewer ranks, or run this test on a larger machine."
        )


def available_memory() -> int | None:
    """Bytes of memory available to new processes (Linux), or None where unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def make_plan(
    arguments: Arguments, test_device: str | None, default_timeout: float, where: str
) -> Plan:
    """The plan for a test whose marker is ``arguments``; ``test_device`` is its
    ``torch_device`` type, if it is parametrized by one."""
    timeout = arguments.timeout or default_timeout
    world = arguments.world_size
    wanted: tuple[str, ...]
    if arguments.device is not None and test_device is not None:
        if test_device not in arguments.device:
            skip = (
                f"this variant's torch_device is {test_device}, and the marker's"
                f" device={arguments.device!r} does not include it: its ranks would run"
                f" on another device than torch_device says"
            )
            backend = arguments.backend or default_backend(test_device)
            return Plan(world, backend, test_device, (), timeout, skip=skip)
        wanted = (test_device,)
    elif arguments.device is not None:
        wanted = arguments.device
    elif test_device is not None:
        wanted = (test_device,)
    else:
        accelerators = [t for t in devices.available_device_types() if t != "cpu"]
        wanted = (*accelerators[:1], "cpu")
    reasons: list[str] = []
    for device_type in wanted:
        chosen, why = _devices_for(device_type, world, arguments.share_devices)
        if chosen is not None:
            backend = arguments.backend or default_backend(device_type)
            missing = [
                name
                for name in _backend_names(backend)
                if not devices.collective_backend_available(name)
            ]
            if missing:
                reasons.append(f"{device_type}: backend {missing[0]} is not in this torch build")
                continue
            if len(set(chosen)) < len(chosen) and "nccl" in _backend_names(backend):
                reasons.append(
                    f"{device_type}: nccl cannot put two ranks on one GPU (NCCL refuses a"
                    " duplicate GPU); give the marker backend='gloo' to share GPUs"
                )
                continue
            return Plan(world, backend, device_type, chosen, timeout)
        reasons.append(why)
    backend = arguments.backend or default_backend(wanted[0])
    skip = f"{DISTRIBUTED.name}(world_size={world}) cannot run here: {'; '.join(reasons)}"
    return Plan(world, backend, wanted[0], (), timeout, skip=skip)


def default_backend(device_type: str) -> str:
    """The device's own backend; on an accelerator, gloo beside it for CPU tensors
    (``cpu:gloo,cuda:nccl``), so a test's CPU collectives work on a GPU machine too."""
    own = devices.collective_backend(device_type)
    if device_type == "cpu" or own == "gloo":
        return own
    return f"cpu:gloo,{device_type}:{own}"


def _backend_names(backend: str) -> list[str]:
    """``cpu:gloo,cuda:nccl`` -> ``["gloo", "nccl"]``."""
    return [part.split(":")[-1] for part in backend.split(",")]


def _devices_for(device_type: str, world: int, share: bool) -> tuple[tuple[str, ...] | None, str]:
    if device_type == "cpu":
        return ("cpu",) * world, ""
    if not devices.is_available(device_type):
        return None, f"no {device_type} device here"
    count = devices.device_count(device_type)
    if count >= world or (share and count > 0):
        return tuple(f"{device_type}:{rank % count}" for rank in range(world)), ""
    visible = (
        " (this pytest-xdist worker was given its own share of the GPUs)"
        if os.environ.get("PYTEST_XDIST_WORKER")
        else ""
    )
    return None, (
        f"{world} ranks need {world} {device_type} devices, one each, and this process sees"
        f" {count}{visible}; give the marker share_devices=True to let ranks share them, or"
        f" device=('{device_type}', 'cpu') to fall back to gloo on the CPU"
    )
