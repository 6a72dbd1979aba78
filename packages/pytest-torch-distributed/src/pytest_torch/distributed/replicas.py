"""Assertions for what data-parallel code gets wrong: replicas that drift apart.

Both are collectives: every rank of the group calls them, and every rank gets the same
verdict. Tensors are compared by an exact digest of their bytes first (two integer
checksums, computed where the tensor lives), and only those that differ are gathered,
so a large model costs one small exchange when its replicas agree.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_torch.core import pytrees

if TYPE_CHECKING:
    import torch

#: how many differing tensors a message names after the first
SHOWN_ALSO = 5


@dataclass(frozen=True)
class _Entry:
    name: str
    kind: str  # "parameter", "buffer" or "tensor"
    shape: tuple[int, ...]
    dtype: str
    digest: tuple[int, int]


def _dist() -> Any:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "this check compares ranks, and no process group is initialized: call it inside"
            " a test marked @pytest.mark.torch_distributed(world_size=N), or after"
            " torch.distributed.init_process_group()"
        )
    return dist


def digest(tensor: torch.Tensor) -> tuple[int, int]:
    """Two checksums of the tensor's bytes: equal for bitwise-equal tensors, and in
    practice different for any others."""
    import torch

    data = tensor.detach().contiguous()
    if data.is_complex():
        data = torch.view_as_real(data).contiguous()
    raw = data.reshape(-1).view(torch.uint8).to(torch.int64)
    index = torch.arange(raw.numel(), device=raw.device, dtype=torch.int64)
    first = ((index * 1000003 + 12345) % 2147483647 * raw).sum()
    second = ((index * 999983 + 6789) % 2147483629 * (raw + 1)).sum()
    return int(first), int(second)


def _entries(named: Iterable[tuple[str, str, torch.Tensor]]) -> list[_Entry]:
    return [
        _Entry(name, kind, tuple(t.shape), str(t.dtype).removeprefix("torch."), digest(t))
        for name, kind, t in named
    ]


def _named_state(model: Any) -> list[tuple[str, str, torch.Tensor]]:
    import torch

    if isinstance(model, torch.nn.Module):
        module: Any = model.module if _is_wrapper(model) else model
        named = [(n, "parameter", p) for n, p in module.named_parameters()]
        named += [(n, "buffer", b) for n, b in module.named_buffers()]
        return named
    if isinstance(model, Mapping):
        return [(str(n), "tensor", t) for n, t in model.items() if isinstance(t, torch.Tensor)]
    raise TypeError(
        "assert_replicas_in_sync takes a torch.nn.Module (DDP-wrapped or not) or a"
        f" state_dict, got {type(model).__name__}"
    )


def _is_wrapper(model: Any) -> bool:
    """DDP or DataParallel: the model is their ``module`` (named without "module.")."""
    from torch.nn import DataParallel
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, (DistributedDataParallel, DataParallel))


def assert_replicas_in_sync(
    model: Any,
    *,
    rtol: float = 0.0,
    atol: float = 0.0,
    buffers: bool = True,
    group: Any = None,
) -> None:
    """Assert every parameter and buffer of ``model`` is the same on every rank.

    Bitwise by default; with ``rtol``/``atol``, within ``|a - b| <= atol + rtol * |b|``
    of rank 0's. The message names the first tensor that differs, the ranks that differ
    from rank 0 and by how much, the other tensors that differ, and the usual cause for
    that kind of tensor. ``buffers=False`` compares the parameters only (DDP's buffers
    differ between a training forward and the next one by design: rank 0's replace the
    others' at the start of each forward).
    """
    __tracebackhide__ = True
    dist = _dist()
    named = [n for n in _named_state(model) if buffers or n[1] != "buffer"]
    mine = _entries(named)
    everyone = _gather_objects(dist, mine, group)
    tensors = {name: t for name, _, t in named}
    failures: list[tuple[_Entry, str]] = []
    for index, entry in enumerate(mine):
        per_rank = [entries[index] if index < len(entries) else None for entries in everyone]
        problem = _compare(dist, entry, per_rank, tensors[entry.name], rtol, atol, group)
        if problem:
            failures.append((entry, problem))
    structure = _structure(everyone)
    if structure:
        raise AssertionError(f"replicas out of sync: {structure}")
    if failures:
        # DDP built with broadcast_buffers=False never makes its buffers agree
        broadcasts = getattr(model, "broadcast_buffers", None) if _is_wrapper(model) else None
        raise AssertionError(_message(failures, len(mine), len(everyone), rtol, atol, broadcasts))


def assert_same_across_ranks(
    value: Any, *, rtol: float = 0.0, atol: float = 0.0, name: str = "value", group: Any = None
) -> None:
    """Assert ``value`` is the same on every rank: a tensor, a NumPy array, any value
    compared with ``==``, or containers of them (lists, tuples, dicts, dataclasses, a
    state_dict). Tensors and arrays bitwise unless ``rtol``/``atol`` are given."""
    __tracebackhide__ = True
    dist = _dist()
    leaves = [(path, _as_tensor(leaf)) for path, leaf in pytrees.leaves(value, name)]
    mine = [_leaf_entry(path, leaf) for path, leaf in leaves]
    everyone = _gather_objects(dist, mine, group)
    shapes = [[(e[0], e[1]) for e in entries] for entries in everyone]
    for rank, layout in enumerate(shapes[1:], start=1):
        if layout != shapes[0]:
            raise AssertionError(
                f"{name} differs across ranks in structure: rank 0 has"
                f" {_layout(shapes[0])}; rank {rank} has {_layout(layout)}"
            )
    problems: list[str] = []
    for index, (path, leaf) in enumerate(leaves):
        per_rank = [entries[index] for entries in everyone]
        if per_rank[0][1] == "tensor":
            tensor_entries = [entry[2] for entry in per_rank]
            problem = _compare(dist, tensor_entries[0], tensor_entries, leaf, rtol, atol, group)
            if problem:
                problems.append(f"{path}: {problem}")
        else:
            differ = [r for r, entry in enumerate(per_rank) if not _same(entry[2], per_rank[0][2])]
            if differ:
                shown = "; ".join(f"rank {r}: {per_rank[r][3]}" for r in differ[:SHOWN_ALSO])
                problems.append(f"{path}: rank 0 has {per_rank[0][3]}; {shown}")
    if problems:
        lines = [f"{name} differs across ranks:", *problems[: 1 + SHOWN_ALSO]]
        if len(problems) > 1 + SHOWN_ALSO:
            lines.append(f"... and {len(problems) - 1 - SHOWN_ALSO} more")
        raise AssertionError("\n".join(lines))


def _as_tensor(leaf: Any) -> Any:
    """A NumPy array (or anything with ``__array__`` and a dtype) as a tensor."""
    import torch

    if not isinstance(leaf, torch.Tensor) and hasattr(leaf, "__array__") and hasattr(leaf, "dtype"):
        try:
            return torch.as_tensor(leaf)
        except (TypeError, ValueError, RuntimeError):
            return leaf
    return leaf


def _leaf_entry(path: str, leaf: Any) -> tuple[str, str, Any, str]:
    """(path, kind, what is compared, how it is shown) of one leaf."""
    import torch

    if isinstance(leaf, torch.Tensor):
        entry = _entries([(path, "tensor", leaf)])[0]
        return (path, "tensor", entry, f"tensor {list(entry.shape)}")
    return (path, type(leaf).__name__, leaf, repr(leaf)[:200])


def _same(a: Any, b: Any) -> bool:
    """``a == b`` where that is a plain bool; otherwise the values' pickled bytes (never
    their text, which rounds and truncates)."""
    try:
        equal = a == b
        if isinstance(equal, bool):
            return equal
    except Exception:
        pass
    try:
        return pickle.dumps(a) == pickle.dumps(b)
    except Exception:
        return False


def _layout(entries: list[tuple[str, str]]) -> str:
    shown = ", ".join(f"{path} ({kind})" for path, kind in entries[:8])
    return shown + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")


def _gather_objects(dist: Any, obj: Any, group: Any) -> list[Any]:
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, obj, group=group)
    return gathered


def _structure(everyone: list[list[_Entry]]) -> str:
    """The ranks whose models have other tensors, or other shapes, than rank 0's."""
    reference = [(e.name, e.shape, e.dtype) for e in everyone[0]]
    for rank, entries in enumerate(everyone[1:], start=1):
        mine = [(e.name, e.shape, e.dtype) for e in entries]
        if mine != reference:
            extra = sorted({n for n, *_ in mine} - {n for n, *_ in reference})
            missing = sorted({n for n, *_ in reference} - {n for n, *_ in mine})
            if extra or missing:
                return (
                    f"rank {rank}'s model has other tensors than rank 0's (only on rank"
                    f" {rank}: {', '.join(extra) or 'none'}; missing there:"
                    f" {', '.join(missing) or 'none'})"
                )
            shapes = [
                f"{a[0]} {a[1]}/{a[2]} vs {b[1]}/{b[2]}"
                for a, b in zip(reference, mine, strict=True)
                if a != b
            ]
            differ = "; ".join(shapes[:SHOWN_ALSO])
            return f"rank {rank}'s tensors differ in shape or dtype from rank 0's: {differ}"
    return ""


def _compare(
    dist: Any,
    entry: _Entry,
    per_rank: list[Any],
    tensor: torch.Tensor,
    rtol: float,
    atol: float,
    group: Any,
) -> str:
    """ "" when every rank holds the same tensor; else how the ranks differ."""
    if all(other is not None and other.digest == per_rank[0].digest for other in per_rank):
        return ""
    if any(
        other is None or other.shape != entry.shape or other.dtype != entry.dtype
        for other in per_rank
    ):
        return ""  # told once for the whole model by _structure
    import torch

    gathered = [torch.empty_like(tensor) for _ in per_rank]
    dist.all_gather(gathered, tensor.detach().contiguous(), group=group)
    reference = gathered[0]
    parts: list[str] = []
    for rank, other in enumerate(gathered[1:], start=1):
        if per_rank[rank].digest == per_rank[0].digest:
            continue
        if (rtol or atol) and torch.allclose(
            other.double(), reference.double(), rtol=rtol, atol=atol, equal_nan=True
        ):
            continue
        parts.append(_difference(rank, other, reference))
    return "; ".join(parts)


def _difference(rank: int, other: torch.Tensor, reference: torch.Tensor) -> str:
    import torch

    if other.dtype == torch.bool or not (other.is_floating_point() or other.is_complex()):
        delta = (other.long() - reference.long()).abs()
    else:
        delta = (other.double() - reference.double()).abs().nan_to_num(nan=float("inf"))
    flat = int(delta.reshape(-1).argmax()) if delta.numel() else 0
    where = (
        [int(i) for i in torch.unravel_index(torch.tensor(flat), other.shape)]
        if other.dim()
        else []
    )
    changed = int((other != reference).sum())
    at_ref = reference.reshape(-1)[flat].item() if reference.numel() else None
    at_other = other.reshape(-1)[flat].item() if other.numel() else None
    return (
        f"rank {rank} differs from rank 0 by up to {float(delta.max()):.6g} in"
        f" {changed} of {other.numel()} elements (at {where}: {at_other!r} vs {at_ref!r})"
    )


def _message(
    failures: list[tuple[_Entry, str]],
    total: int,
    world: int,
    rtol: float,
    atol: float,
    broadcast_buffers: bool | None = None,
) -> str:
    entry, problem = failures[0]
    how = "bitwise" if not (rtol or atol) else f"within rtol={rtol}, atol={atol}"
    lines = [
        f"replicas out of sync: {len(failures)} of {total} tensors differ across the {world}"
        f" ranks ({how}).",
        f"first: {entry.kind} {entry.name} (shape {list(entry.shape)}, {entry.dtype}): {problem}",
    ]
    for other, text in failures[1 : 1 + SHOWN_ALSO]:
        lines.append(f"also: {other.kind} {other.name}: {text}")
    if len(failures) > 1 + SHOWN_ALSO:
        lines.append(f"... and {len(failures) - 1 - SHOWN_ALSO} more")
    kinds = {e.kind for e, _ in failures}
    if "buffer" in kinds and broadcast_buffers is False:
        lines.append(
            "Buffers differ: this DDP model was built with broadcast_buffers=False, so each"
            " rank keeps its own buffers (a BatchNorm's running statistics come from its own"
            " batches) and nothing makes them agree. Convert the model with"
            " torch.nn.SyncBatchNorm.convert_sync_batchnorm, build DDP with"
            " broadcast_buffers=True, or pass buffers=False where they may differ."
        )
    elif "buffer" in kinds:
        lines.append(
            "Buffers differ: a BatchNorm's running statistics are computed from each rank's"
            " own batch. Under DDP with broadcast_buffers=True (its default) rank 0's replace"
            " the others' at the start of the next forward, so they differ after a training"
            " forward by design: check after a forward in eval mode or pass buffers=False."
            " Otherwise convert the model with torch.nn.SyncBatchNorm.convert_sync_batchnorm,"
            " or look for a buffer updated on some ranks only."
        )
    if "parameter" in kinds:
        lines.append(
            "Parameters differ: either the ranks started apart (seed every rank the same"
            " before building the model, or let DDP broadcast rank 0's parameters at"
            " construction) or a step updated them outside DDP's gradient all-reduce (a"
            " gradient changed on one rank after backward, an optimizer over a copy of the"
            " model, no_sync() without a final synchronised step)."
        )
    return "\n".join(lines)
