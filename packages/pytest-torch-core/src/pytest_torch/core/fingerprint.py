"""A stable, readable key for "this machine's hardware".

Performance baselines are keyed by it so numbers from different machines never mix.
The key holds only what decides speed and never changes between runs on one machine:
the CPU model, the logical CPUs this process may use, and each accelerator's kind,
name, count, total memory and compute capability. Volatile readings (clock speed,
free memory) are left out; software versions are recorded beside the key, not in it.

Run ``python -m pytest_torch.core.fingerprint`` to see this machine's key.
"""

from __future__ import annotations

import functools
import json
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_torch.core import devices
from pytest_torch.core.cpus import available_cores, cpu_model, normalise_spaces
from pytest_torch.core.units import GIB


@dataclass(frozen=True)
class AcceleratorGroup:
    """Identical accelerators of one kind, e.g. 2 x NVIDIA H200."""

    kind: str
    name: str
    count: int
    total_memory_gib: float | None
    compute_capability: str | None

    def describe(self, *, count: bool = True) -> str:
        """``cuda: 2 x NVIDIA H200 (139.8 GiB, cc 9.0)``; without ``count``, the model
        alone (what the key holds)."""
        details = []
        if self.total_memory_gib is not None:
            details.append(f"{self.total_memory_gib:.1f} GiB")
        if self.compute_capability is not None:
            details.append(f"cc {self.compute_capability}")
        suffix = f" ({', '.join(details)})" if details else ""
        how_many = f"{self.count} x " if count else ""
        return f"{self.kind}: {how_many}{self.name}{suffix}"


@dataclass(frozen=True)
class HardwareFingerprint:
    """What decides speed on this machine. Equal fingerprints have equal keys."""

    cpu_model: str
    logical_cpus: int
    accelerators: tuple[AcceleratorGroup, ...] = ()
    #: torch, Python and CUDA versions: recorded beside the key, never part of it.
    versions: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        """One line, readable, stable: ``cpu: AMD EPYC 9654 x 16 | cuda: NVIDIA H200 (...)``.

        Accelerators appear by model, not by count: how many GPUs a process sees changes
        with ``CUDA_VISIBLE_DEVICES`` (and each xdist worker sees only its own), while a
        test's speed depends on the model it runs on."""
        parts = [f"cpu: {self.cpu_model} x {self.logical_cpus}"]
        parts += [group.describe(count=False) for group in self.accelerators]
        return " | ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["accelerators"] = [asdict(group) for group in self.accelerators]
        data["key"] = self.key
        return data


def _accelerator_groups() -> tuple[AcceleratorGroup, ...]:
    groups: list[AcceleratorGroup] = []
    for kind in devices.accelerator_types():
        count = devices.device_count(kind)
        if count == 0:
            continue
        per_device: dict[tuple[str, float | None, str | None], int] = {}
        for index in range(count):
            device = f"{kind}:{index}" if kind != "mps" else "mps"
            memory = devices.total_memory(device)
            gib = round(memory / GIB, 1) if memory else None
            signature = (devices.device_name(device), gib, devices.compute_capability(device))
            per_device[signature] = per_device.get(signature, 0) + 1
        for (name, gib, cap), n in sorted(per_device.items(), key=lambda kv: str(kv[0])):
            groups.append(AcceleratorGroup(kind, normalise_spaces(name), n, gib, cap))
    return tuple(groups)


def _versions() -> dict[str, str]:
    import torch

    versions = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
    }
    if torch.version.cuda:
        versions["cuda"] = str(torch.version.cuda)
    hip = getattr(torch.version, "hip", None)
    if hip:
        versions["hip"] = str(hip)
    return versions


@functools.cache
def hardware_fingerprint() -> HardwareFingerprint:
    """This machine's fingerprint (computed once per process)."""
    return HardwareFingerprint(
        cpu_model=cpu_model(),
        logical_cpus=available_cores(),
        accelerators=_accelerator_groups(),
        versions=_versions(),
    )


def main() -> int:
    fingerprint = hardware_fingerprint()
    if "--json" in sys.argv[1:]:
        print(json.dumps(fingerprint.to_dict(), indent=2, sort_keys=True))
    else:
        print(fingerprint.key)
        for name, version in sorted(fingerprint.versions.items()):
            print(f"  {name} {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
