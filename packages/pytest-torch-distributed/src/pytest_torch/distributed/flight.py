"""Reading this rank's collectives from torch's flight recorder (in a rank only).

torch records every collective a process group runs (gloo's and nccl's, DDP's
gradient all-reduce and FSDP's all-gathers included, which never pass through the
Python API) in a ring buffer of 2000 entries per process, with the op, the tensors'
sizes and dtypes, whether it completed, and the Python stack that called it. It is on
by default, so reading it costs the test nothing until a test fails: one dump, read
here, from a thread of its own while the test's thread may be blocked in a collective.
The first dump with stacks takes about a second (torch prepares to symbolize them).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_torch.distributed.collectives import Call, Group, Record
from pytest_torch.distributed.groups import c10d

#: torch's names for dtypes in the recorder -> the names people write
_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "ComplexHalf": "complex32",
}
#: what in torch called a collective for the test, by the file it is in
_WITHIN = (
    ("/torch/nn/parallel/distributed.py", "DistributedDataParallel"),
    ("/torch/distributed/fsdp/", "FSDP"),
    ("/torch/distributed/tensor/", "DTensor"),
    ("/torch/distributed/optim/", "ZeroRedundancyOptimizer"),
    ("/torch/autograd/", "backward"),
    ("/torch/_tensor.py", "backward"),
    ("/torch/distributed/_functional_collectives.py", "a functional collective"),
)
_C10D = "/torch/distributed/distributed_c10d.py"
_covered: dict[str, bool] = {}


@dataclass(frozen=True)
class _Frame:
    filename: str
    lineno: int
    name: str


def _dump(stacks: bool, active: bool = False, nccl_too: bool = False) -> dict[str, Any] | str:
    """The recorder's content, or why it cannot be read; with NCCL's recorder's entries
    where ``nccl_too`` (a group on NCCL)."""
    import torch

    c10d = torch._C._distributed_c10d
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is None:
        return f"torch {torch.__version__} has no flight recorder of collectives to read"
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        size = os.environ.get(name)
        if size is not None:
            if size.strip() == "0":
                return f"torch's flight recorder is off ({name}=0)"
            break
    try:
        data = pickle.loads(dump(True, stacks, active))
    except Exception as exc:  # a torch that cannot dump here: no record, never an error
        return f"torch's flight recorder could not be read ({type(exc).__name__}: {exc})"
    if not isinstance(data, dict):
        return "torch's flight recorder gave no entries"
    # NCCL's calls are kept by a recorder of their own (it times them with CUDA events)
    nccl = getattr(c10d, "_dump_nccl_trace", None) if nccl_too else None
    if nccl is not None:
        try:
            theirs = pickle.loads(nccl(True, stacks, active))
            entries = [*data.get("entries", []), *theirs.get("entries", [])]
            entries.sort(key=lambda entry: entry.get("time_created_ns") or 0)
            data = {**data, "entries": entries}
        except Exception:  # gloo's calls are still worth showing
            pass
    return data


def covers_gloo() -> bool:
    """Whether this torch records gloo's collectives: one all-reduce on a private
    one-rank group, looked for in the recorder (once per process, a few ms)."""
    if "gloo" not in _covered:
        import datetime

        import torch

        dist = c10d()

        def last() -> int | None:
            """The newest entry's id (the ring keeps 2000: counting them would not
            tell once it is full), -1 for none; None when the recorder cannot be read."""
            data = _dump(False)
            if not isinstance(data, dict):
                return None
            return max((int(e.get("record_id", -1)) for e in data.get("entries", [])), default=-1)

        before = last()
        try:
            group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=10))
            group.allreduce([torch.zeros(1)]).wait()
            after = last()
            _covered["gloo"] = before is not None and after is not None and after > before
        except Exception:
            _covered["gloo"] = False
    return _covered["gloo"]


def snapshot(rank: int, since_ns: int, stacks: bool, backend: str, active: bool = False) -> Record:
    """This rank's collectives since ``since_ns`` (``time.time_ns()`` when the test's
    process group was formed), with the test's line for each when ``stacks``; only the
    calls not completed yet when ``active`` (a read that stays cheap however full the
    recorder is)."""
    import torch

    data = _dump(stacks, active, nccl_too="nccl" in backend)
    if isinstance(data, str):
        return Record(rank, missing=data)
    if "gloo" in backend and "nccl" not in backend and not covers_gloo():
        why = f"torch {torch.__version__}'s flight recorder does not record gloo's collectives"
        return Record(rank, missing=why)
    groups = _groups()
    calls: list[Call] = []
    first_kept: dict[str, int] = {}
    for entry in data.get("entries", []):
        call = _call(entry, since_ns)
        if call is None:
            continue
        calls.append(call)
        first_kept.setdefault(call.group, call.seq)
    return Record(rank, tuple(calls), groups, first_kept)


def _group_of(entry: dict[str, Any]) -> tuple[str, str]:
    group = entry.get("process_group") or ("", "")
    return (str(group[0]), str(group[1]) if len(group) > 1 else "")


def _call(entry: dict[str, Any], since_ns: int) -> Call | None:
    name, _desc = _group_of(entry)
    if not name or (entry.get("time_created_ns") or 0) < since_ns or entry.get("is_p2p"):
        return None
    op = str(entry.get("profiling_name") or "?").split(":")[-1]
    frames = [
        _Frame(str(f.get("filename", "")), int(f.get("line") or 0), str(f.get("name", "")))
        for f in reversed(entry.get("frames") or [])
    ]
    return Call(
        group=name,
        seq=int(entry.get("collective_seq_id") or 0),
        op=op,
        shapes=tuple(tuple(int(d) for d in size) for size in entry.get("input_sizes") or []),
        dtypes=tuple(_DTYPES.get(str(d), str(d).lower()) for d in entry.get("input_dtypes") or []),
        pending=not entry.get("retired", True),
        site=_site(frames),
        within=_within(frames, op),
        created_ns=int(entry.get("time_created_ns") or 0),
    )


def _site(frames: Sequence[_Frame]) -> str:
    """``test_x.py:21``: the test's line that led to the call (outermost first)."""
    from pytest_torch.core.sites import shown_path, site_of_stack

    site = site_of_stack(frames)
    return "" if site is None else f"{shown_path(site.filename)}:{site.lineno}"


def _within(frames: Sequence[_Frame], op: str) -> str:
    """What in torch made the call for the test: the outermost torch.distributed
    function other than the op itself, else the torch machinery around it."""
    paths = [(f.filename.replace("\\", "/"), f.name) for f in frames]
    public = [
        name
        for path, name in paths
        if path.endswith(_C10D) and not name.startswith("_") and name not in ("wrapper", op)
    ]
    if public:
        return public[0]
    for marker, what in _WITHIN:
        if any(marker in path for path, _ in paths):
            return what
    return ""


def _groups() -> dict[str, Group]:
    """The process groups alive now: name -> its members' global ranks."""
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _world

        if not dist.is_initialized():
            return {}
        found = {}
        for group in list(_world.pg_map):
            name = str(getattr(group, "group_name", ""))
            desc = str(getattr(group, "group_desc", ""))
            ranks = tuple(sorted(_world.pg_group_ranks.get(group, {})))
            found[name] = Group(name, desc, ranks)
        return found
    except Exception:  # torch's private bookkeeping moved: members unknown
        return {}
