"""Which accelerator device ("GPU") each xdist worker uses, and how much of its memory.

Any accelerator type torch reports goes: CUDA, Intel XPU, or a PrivateUse1 backend
(Ascend NPUs, say). Indices are torch's: they count the devices this process sees, so
an outer ``CUDA_VISIBLE_DEVICES`` (or ``ZE_AFFINITY_MASK`` for Intel XPU) is honoured —
index 0 is the first visible one. CUDA and XPU workers are narrowed to their device by
that variable; a type without one the family knows is given its device as the
worker's current device instead. Device questions go through the core device layer.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from pytest_torch.core import devices
from pytest_torch.core.units import GIB
from pytest_torch.xdist.options import GPU_MEMORY_FRACTION, XDIST_GPUS

#: accelerator types a worker can be given, in order of preference; torch's current
#: accelerator joins them when it is another type (a PrivateUse1 backend)
GPU_TYPES = ("cuda", "xpu")
#: one device shared by every process, with one process-wide memory fraction: nothing to
#: spread workers over
UNSPREADABLE = ("mps",)
#: memory kept back once per GPU (driver, the allocators' fragmentation) by ``auto``
GPU_RESERVE_BYTES = GIB
#: memory kept back for each process on a GPU by ``auto``: its CUDA/XPU context and the
#: kernels and handles of cuBLAS/cuDNN live outside the caching allocator, so the
#: per-process fraction does not count them (a context alone is 0.3-0.6 GiB)
PROCESS_RESERVE_BYTES = GIB
#: below this much memory per worker, ``auto`` refuses to start
MIN_SHARE_BYTES = GIB
VISIBILITY_VARIABLES = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


class GpuSettingError(ValueError):
    """A GPU list or memory fraction that cannot be used on this machine."""


def gpu_type() -> str | None:
    """The accelerator type workers are spread over: the first with devices."""
    kinds = [*GPU_TYPES, *(t for t in devices.accelerator_types() if t not in GPU_TYPES)]
    for kind in kinds:
        if kind in UNSPREADABLE:
            continue
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
            f"{source}: torch sees no accelerator device here (CUDA, Intel XPU, or a"
            " PrivateUse1 backend through torch.accelerator; Apple MPS has one device"
            f" that every process shares); run without {source.split()[0]}."
        )
    count = devices.device_count(kind)
    if indices is None:
        return GpuPlan(kind, tuple(range(count)))
    missing = [i for i in indices if not 0 <= i < count]
    if missing or len(set(indices)) != len(indices):
        visible = VISIBILITY_VARIABLES.get(kind)
        after = f" (after {visible})" if visible else ""
        raise GpuSettingError(
            f"{source}: device {', '.join(map(str, missing)) or 'indices'} not usable: this"
            f" process sees {count} {kind} device(s), numbered 0..{count - 1}{after}, and"
            f" each index may appear once; got {value!r}"
        )
    return GpuPlan(kind, indices)


def _gib(size: float) -> str:
    return f"{size / GIB:.1f} GiB"


def auto_fraction(total_bytes: int | None, sharing: int, where: str = "the GPU") -> float:
    """Each of ``sharing`` processes' share of a GPU of ``total_bytes``, after
    :data:`GPU_RESERVE_BYTES` for the GPU and :data:`PROCESS_RESERVE_BYTES` for each
    process. Raises :class:`GpuSettingError` when a share would be under
    :data:`MIN_SHARE_BYTES`. Without a known size: an even split."""
    sharing = max(1, sharing)
    if not total_bytes:
        return 1 / sharing
    reserve = GPU_RESERVE_BYTES + sharing * PROCESS_RESERVE_BYTES
    share = (total_bytes - reserve) / sharing
    if share < MIN_SHARE_BYTES:
        left = f"{_gib(share)} each" if share > 0 else "nothing"
        explicit = max(0.01, math.floor(100 / sharing) / 100)
        raise GpuSettingError(
            f"{GPU_MEMORY_FRACTION}=auto: {where} has {_gib(total_bytes)} and"
            f" {sharing} worker process(es) share it; after reserving {_gib(GPU_RESERVE_BYTES)}"
            f" for the GPU and {_gib(PROCESS_RESERVE_BYTES)} per process for its context and"
            f" library workspaces ({_gib(reserve)} in all) that leaves {left}, and auto needs"
            f" at least {_gib(MIN_SHARE_BYTES)} per worker. Run fewer workers (-n), spread"
            f" them over more GPUs ({XDIST_GPUS}), or set the fraction yourself"
            f" ({GPU_MEMORY_FRACTION}={explicit}, no reserve)."
        )
    return share / total_bytes


def visible_value(kind: str, index: int, outer: str | None) -> str:
    """The value of ``kind``'s visibility variable that shows a new process only the GPU
    this process calls ``kind:index``.

    Without an outer value (``CUDA_VISIBLE_DEVICES`` unset) that is the index itself;
    with one, it is the index-th entry of the outer list, as text: an index, a GPU UUID
    or a MIG id, so the worker sees exactly the device this process numbers ``index``.
    """
    if outer is None or not outer.strip():
        return str(index)
    entries = [entry.strip() for entry in outer.split(",")]
    if not 0 <= index < len(entries) or not entries[index]:
        variable = VISIBILITY_VARIABLES[kind]
        raise GpuSettingError(
            f"{XDIST_GPUS}: {kind}:{index} has no entry in {variable}={outer!r}"
            f" ({len(entries)} entries, counted from 0); list the GPUs to use there or"
            f" choose indices below {len(entries)}."
        )
    return entries[index]


class Assignment(NamedTuple):
    """What the controller gives one worker: sent in its ``workerinput`` as a dict."""

    kind: str
    #: the GPU as the controller numbers it (header, lock names)
    gpu: int
    #: the visibility variable set in the worker's environment, or None: not narrowed
    variable: str | None
    value: str | None
    #: the per-process memory fraction to apply, or None
    fraction: float | None

    def describe(self) -> str:
        text = f"{self.kind}:{self.gpu}"
        if self.variable is not None:
            text += f" ({self.variable}={self.value})"
        if self.fraction is not None:
            text += f", {self.fraction:.1%} of its memory"
        return text

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Assignment:
        return cls(
            str(data["kind"]),
            int(data["gpu"]),
            None if data["variable"] is None else str(data["variable"]),
            None if data["value"] is None else str(data["value"]),
            None if data["fraction"] is None else float(data["fraction"]),
        )
