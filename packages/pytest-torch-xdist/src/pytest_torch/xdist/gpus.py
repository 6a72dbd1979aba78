"""Which GPU each xdist worker uses, and how much of its memory.

GPU indices are torch's: they count the devices this process sees, so an outer
``CUDA_VISIBLE_DEVICES`` (or ``ZE_AFFINITY_MASK`` for Intel XPU) is honoured — index 0
is the first visible one. Device questions go through the core device layer.
"""

from __future__ import annotations

from typing import NamedTuple

from pytest_torch.core import devices

#: accelerator types a worker can be given, in order of preference
GPU_TYPES = ("cuda", "xpu")
#: memory left to each GPU's contexts (CUDA/XPU runtime, cuBLAS/cuDNN workspaces) and
#: the allocator's fragmentation before the workers' fractions are split
CONTEXT_RESERVE_BYTES = 1 << 30
VISIBILITY_VARIABLES = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


class GpuSettingError(ValueError):
    """A GPU list or memory fraction that cannot be used on this machine."""


def gpu_type() -> str | None:
    """The accelerator type workers are spread over: the first with devices."""
    for kind in GPU_TYPES:
        if devices.is_available(kind) and devices.device_count(kind) > 0:
            return kind
    return None


class GpuPlan(NamedTuple):
    kind: str
    indices: tuple[int, ...]

    def index_for(self, worker: int) -> int:
        """Round-robin: worker i gets the (i mod n)-th listed GPU."""
        return self.indices[worker % len(self.indices)]

    def sharing(self, index: int, workers: int) -> int:
        """How many of ``workers`` workers use GPU ``index``."""
        return sum(1 for w in range(max(1, workers)) if self.index_for(w) == index)


def parse_gpus(value: object, source: str) -> GpuPlan:
    """A plan from ``auto`` or a comma list such as ``0,1``; checks the GPUs exist."""
    text = str(value).strip().lower()
    indices: tuple[int, ...] | None = None
    if text not in ("auto", "all", ""):
        try:
            indices = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise GpuSettingError(
                f"{source}: expected auto or comma-separated GPU indices such as 0,1, got {value!r}"
            ) from None
    kind = gpu_type()
    if kind is None:
        raise GpuSettingError(
            f"{source}: this machine has no CUDA or Intel XPU device that torch can use;"
            f" run without {source.split()[0]} (tests needing a GPU are then skipped)."
        )
    count = devices.device_count(kind)
    if indices is None:
        return GpuPlan(kind, tuple(range(count)))
    missing = [i for i in indices if not 0 <= i < count]
    if missing or len(set(indices)) != len(indices):
        visible = VISIBILITY_VARIABLES[kind]
        raise GpuSettingError(
            f"{source}: GPU {', '.join(map(str, missing)) or 'indices'} not usable: this"
            f" process sees {count} {kind} device(s), numbered 0..{count - 1} (after"
            f" {visible}), and each index may appear once; got {value!r}"
        )
    return GpuPlan(kind, indices)


def parse_fraction(value: object, source: str) -> float | str:
    """``"auto"`` or a number in (0, 1]."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        fraction = float(text)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise GpuSettingError(
            f"{source}: expected auto or a fraction of GPU memory in (0, 1], got {value!r}."
            f" Example: --torch-gpu-memory-fraction=0.45"
        )
    return fraction


def auto_fraction(total_bytes: int | None, sharing: int) -> float:
    """Each of ``sharing`` workers' share of a GPU, after the context reserve."""
    usable = 1.0
    if total_bytes:
        usable = max(0.05, 1 - CONTEXT_RESERVE_BYTES / total_bytes)
    return usable / max(1, sharing)
