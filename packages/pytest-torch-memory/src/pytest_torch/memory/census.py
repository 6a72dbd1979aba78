"""A census of live tensors, grouped by what they are, and of allocated bytes per device.

The leak check takes one after every run of a test body. To keep that cheap in a big
process, :func:`frozen_heap` moves every object that exists before the runs into the
garbage collector's permanent generation: collections and scans then only look at what
the runs created, which is where a leak lives.

Tensors that own no memory are left out without touching their data pointers (which
makes torch warn, or fail): fake tensors that ``torch.compile`` leaves behind,
functional tensors, and meta tensors. Autograd graph nodes that Python holds
(``loss.grad_fn`` kept in a list) are counted too: each keeps the tensors its graph
saved, which Python cannot see.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core import devices
from pytest_torch.core.peaks import storage_key

if TYPE_CHECKING:
    import torch


class GroupKey(NamedTuple):
    """What tensors of one group have in common."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    grad_fn: str | None
    #: "strided" for plain tensors; "sparse_coo", "nested", ... otherwise
    layout: str = "strided"

    def describe(self) -> str:
        shape = f"{self.shape[0]} nested tensors" if self.layout == "nested" else None
        parts = [shape or f"shape {list(self.shape)}", self.dtype, self.device]
        if self.layout not in ("strided", "nested"):
            parts.append(self.layout)
        if self.grad_fn is not None:
            parts.append(f"grad_fn={self.grad_fn}")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        return ", ".join(parts)


def group_key(tensor: torch.Tensor) -> GroupKey | None:
    try:
        grad_fn = tensor.grad_fn
        layout = str(tensor.layout).removeprefix("torch.")
        if tensor.is_nested:  # a nested tensor has no single shape: count its members
            shape: tuple[int, ...] = (int(tensor.size(0)),)
            layout = "nested"
        else:
            shape = tuple(int(n) for n in tensor.shape)
        return GroupKey(
            shape,
            str(tensor.dtype).removeprefix("torch."),
            str(tensor.device),
            bool(tensor.requires_grad),
            None if grad_fn is None else type(grad_fn).__name__,
            layout,
        )
    except Exception:  # a tensor subclass that cannot describe itself is not counted
        return None


#: kinds of objects a census looks at
_TENSOR, _NO_MEMORY, _NODE, _OTHER = range(4)


def _no_memory_types() -> tuple[type, ...]:
    """Tensor types that stand for tensors without memory of their own. Only modules
    already imported are looked in: without them, no such tensor exists."""
    found = []
    for module, name in (
        ("torch._subclasses.fake_tensor", "FakeTensor"),
        ("torch._subclasses.functional_tensor", "FunctionalTensor"),
    ):
        kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type):
            found.append(kind)
    return tuple(found)


def _classify(kind: type, tensor: type, no_memory: tuple[type, ...], node: type) -> int:
    try:
        if issubclass(kind, tensor):
            return _NO_MEMORY if issubclass(kind, no_memory) else _TENSOR
        if issubclass(kind, node):
            return _NODE
    except Exception:  # a type whose subclass check fails is none of ours
        pass
    return _OTHER


def live_objects(
    objects: Iterable[object] | None = None,
) -> tuple[list[torch.Tensor], list[object]]:
    """The tensors that own memory among ``objects`` (default: every object the garbage
    collector tracks), and the autograd graph nodes. Fake, functional and meta tensors
    are skipped without touching their data."""
    import torch
    from torch.autograd.graph import Node

    no_memory = _no_memory_types()
    kinds: dict[type, int] = {}
    tensors: list[torch.Tensor] = []
    nodes: list[object] = []
    for obj in gc.get_objects() if objects is None else objects:
        kind = type(obj)
        known = kinds.get(kind)
        if known is None:  # subclass checks are slow: decide once per type
            known = kinds[kind] = _classify(kind, torch.Tensor, no_memory, Node)
        if known == _TENSOR:
            tensor: Any = obj
            try:
                if tensor.is_meta:
                    continue
            except Exception:  # a subclass that cannot say: not counted
                continue
            tensors.append(tensor)
        elif known == _NODE:
            nodes.append(obj)
    return tensors, nodes


def node_name(node: object) -> str:
    return type(node).__name__


class Census(NamedTuple):
    #: tensors per group
    counts: dict[GroupKey, int]
    #: bytes of the storages first seen in each group (shared storages counted once)
    group_bytes: dict[GroupKey, int]
    #: bytes allocated per device: the allocator's figure on accelerators that report
    #: one, else the storages of the live tensors counted here
    device_bytes: dict[str, int]
    #: autograd graph nodes that Python holds, per node type (``MseLossBackward0``)
    nodes: dict[str, int] = {}  # noqa: RUF012 (never mutated)

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes.values())

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
    tensors, graph_nodes = live_objects()
    nodes: dict[str, int] = {}
    for node in graph_nodes:
        nodes[node_name(node)] = nodes.get(node_name(node), 0) + 1
    del graph_nodes
    for tensor in tensors:
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
    return Census(counts, group_bytes, device_bytes, nodes)


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
