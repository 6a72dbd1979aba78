"""A census of live tensors, grouped by what they are, and of allocated bytes per device.

The leak check takes one after every run of a test body. To keep that cheap in a big
process, :func:`frozen_heap` moves every object that exists before the runs into the
garbage collector's permanent generation: collections and scans then only look at what
the runs created, which is where a leak lives.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from pytest_torch.core import devices
from pytest_torch.core.memory import iter_tensors, storage_key

if TYPE_CHECKING:
    import torch


class GroupKey(NamedTuple):
    """What tensors of one group have in common."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    grad_fn: str | None

    def describe(self) -> str:
        parts = [f"shape {list(self.shape)}", self.dtype, self.device]
        if self.grad_fn is not None:
            parts.append(f"grad_fn={self.grad_fn}")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return ", ".join(parts)


def group_key(tensor: torch.Tensor) -> GroupKey | None:
    try:
        grad_fn = tensor.grad_fn
        return GroupKey(
            tuple(int(n) for n in tensor.shape),
            str(tensor.dtype).removeprefix("torch."),
            str(tensor.device),
            bool(tensor.requires_grad),
            None if grad_fn is None else type(grad_fn).__name__,
        )
    except Exception:  # a tensor subclass that cannot describe itself is not counted
        return None


class Census(NamedTuple):
    #: tensors per group
    counts: dict[GroupKey, int]
    #: bytes of the storages first seen in each group (shared storages counted once)
    group_bytes: dict[GroupKey, int]
    #: bytes allocated per device: the allocator's figure on accelerators that report
    #: one, else the storages of the live tensors counted here
    device_bytes: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def take_census(accelerators: Sequence[torch.device] = ()) -> Census:
    """Collect garbage, then count the live tensors the collector tracks."""
    gc.collect()
    counts: dict[GroupKey, int] = {}
    group_bytes: dict[GroupKey, int] = {}
    device_bytes: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for tensor in iter_tensors():
        key = group_key(tensor)
        if key is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        storage = storage_key(tensor)
        size = 0
        if storage is not None and storage[:2] not in seen:
            seen.add(storage[:2])
            size = storage[2]
            device_bytes[storage[0]] = device_bytes.get(storage[0], 0) + size
        group_bytes[key] = group_bytes.get(key, 0) + size
    for device in accelerators:
        if devices.is_initialized(device.type):
            devices.synchronize(device)
            stats = devices.memory_stats(device)
            if stats is not None:
                device_bytes[str(device)] = stats.allocated
    return Census(counts, group_bytes, device_bytes)


@contextlib.contextmanager
def frozen_heap() -> Iterator[bool]:
    """Hide every existing object from the collector while the block runs.

    Yields False (and freezes nothing) when something else already froze objects:
    unfreezing afterwards would undo its choice too.
    """
    if gc.get_freeze_count():
        yield False
        return
    gc.freeze()
    try:
        yield True
    finally:
        gc.unfreeze()
