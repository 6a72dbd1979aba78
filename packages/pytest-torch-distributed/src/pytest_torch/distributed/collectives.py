"""Each rank's collectives during a test, and where the ranks' sequences part.

A rank's :class:`Record` lists the collectives it called on each process group, in
order, as torch's flight recorder saw them (:mod:`.flight` reads it in the rank): the
op, the tensors' shapes and dtypes, whether it had completed, and the line of the
test's code that led to it. Ranks call a group's collectives in the same order, so the
n-th call of one rank meets the n-th call of every other member. Where they disagree
(another op, other shapes, one rank with fewer calls), the test went wrong there:
:func:`first_divergence` names the place, :func:`deadlock` tells whether ranks that
all wait can never be released, and :mod:`.divergence` says it in words.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ops whose tensors must have the same shape on every rank (the others: gather,
#: scatter and all_to_all take per-rank sizes, and only some ranks pass tensors)
SAME_SHAPES = frozenset(
    {
        "all_reduce",
        "allreduce",
        "allreduce_coalesced",
        "broadcast",
        "reduce",
        "all_gather",
        "allgather",
        "all_gather_into_tensor",
        "_allgather_base",
        "allgather_into_tensor_coalesced",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "reduce_scatter_tensor_coalesced",
    }
)
DEFAULT_GROUP = "0"


@dataclass(frozen=True)
class Call:
    """One collective as a rank called it."""

    group: str
    #: its number on the group: the n-th collective the group ran
    seq: int
    op: str
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    #: not completed when the record was read
    pending: bool = False
    #: the test's line that led to it, ``test_x.py:21`` ("" when unknown)
    site: str = ""
    #: what in torch called it on the test's behalf: ``all_gather_object``,
    #: ``backward`` (DDP's gradient all-reduce), ``FSDP``, ``DTensor`` ("" for a direct call)
    within: str = ""
    created_ns: int = 0

    def tensors(self) -> str:
        """``float32[4]``, ``float32[4] x3``, or "" for none."""
        pairs = zip(self.dtypes, self.shapes, strict=False)
        shown = [f"{dtype}{list(shape)}" if shape else f"{dtype} scalar" for dtype, shape in pairs]
        if not shown:
            return ""
        if len(set(shown)) == 1 and len(shown) > 1:
            return f"{shown[0]} x{len(shown)}"
        if len(shown) > 3:
            return ", ".join(shown[:3]) + f", ... ({len(shown)} tensors)"
        return ", ".join(shown)

    def what(self) -> str:
        """``all_reduce float32[4]``, ``all_gather int64[1] (in all_gather_object)``."""
        text = " ".join(part for part in (self.op, self.tensors()) if part)
        return f"{text} (in {self.within})" if self.within else text

    def describe(self) -> str:
        """``all_reduce float32[4] at test_x.py:21``."""
        return self.what() + (f" at {self.site}" if self.site else "")


@dataclass(frozen=True)
class Group:
    name: str
    desc: str = ""
    #: its members, by global rank
    ranks: tuple[int, ...] = ()

    def shown(self) -> str:
        if self.name == DEFAULT_GROUP:
            return "the default group"
        members = f"ranks {', '.join(map(str, self.ranks))}" if self.ranks else ""
        desc = self.desc if self.desc not in ("", "undefined") else ""
        inside = "; ".join(part for part in (desc, members) if part)
        return f"group {self.name}" + (f" ({inside})" if inside else "")


@dataclass(frozen=True)
class Record:
    """What one rank's flight recorder kept of one test."""

    rank: int
    calls: tuple[Call, ...] = ()
    groups: dict[str, Group] = field(default_factory=dict)
    #: group -> its first call since the test began that the recorder still keeps (above
    #: 1: the group is older than the test, or earlier calls fell out of its buffer)
    first_kept: dict[str, int] = field(default_factory=dict)
    #: why there is no record ("" when there is one)
    missing: str = ""

    def group_of(self, call: Call) -> Group:
        """The group ``call`` was made on (by name alone when its members are unknown)."""
        return self.groups.get(call.group, Group(call.group))

    def on(self, group: str) -> dict[int, Call]:
        return {call.seq: call for call in self.calls if call.group == group}

    def waiting(self) -> dict[str, Call]:
        """Group -> the earliest call not completed on it."""
        found: dict[str, Call] = {}
        for call in self.calls:
            if call.pending and call.group not in found:
                found[call.group] = call
        return found


@dataclass(frozen=True)
class Divergence:
    """The first call of a group where the ranks disagree."""

    group: Group
    seq: int
    #: "op", "shape", "dtype", "missing" (some members never made this call) or
    #: "skipped" (some members skipped this call and made the next one instead)
    kind: str
    #: each member's call of that number (None: it had not made it)
    calls: dict[int, Call | None]
    #: for "missing": how many calls each member had made on the group
    counts: dict[int, int] = field(default_factory=dict)
    #: an earlier call whose lines already differed between ranks (a collective
    #: skipped on some ranks before, matched by the next one of the same kind), or None
    lines_differ_from: int | None = None
    #: that call, by rank
    earlier: dict[int, Call] = field(default_factory=dict)
    #: for "skipped": rank -> the rank whose call of this number it never made (its own
    #: call of this number is that rank's next one)
    skipped: dict[int, int] = field(default_factory=dict)


def _groups(records: dict[int, Record]) -> dict[str, Group]:
    known: dict[str, Group] = {}
    for record in records.values():
        for name, group in record.groups.items():
            if name not in known or (group.ranks and not known[name].ranks):
                known[name] = group
    for record in records.values():
        for call in record.calls:
            known.setdefault(call.group, Group(call.group))
    return known


def _members(group: Group, records: dict[int, Record]) -> list[int]:
    if group.ranks:
        return [rank for rank in group.ranks if rank in records]
    if group.name == DEFAULT_GROUP:  # closed before it was read: it spanned the world
        return sorted(records)
    return sorted(
        rank for rank, rec in records.items() if any(c.group == group.name for c in rec.calls)
    )


#: all_gather into a list takes each rank's own size on NCCL ("uneven sizes are
#: supported"); into one tensor, or for objects, the sizes are the same everywhere
_ALIKE_GATHERS = frozenset({"all_gather_into_tensor", "all_gather_object"})


def _same_shapes(call: Call) -> bool:
    if call.op in ("all_gather", "allgather"):
        return call.within in _ALIKE_GATHERS
    return call.op in SAME_SHAPES


def _differs(calls: list[Call]) -> str | None:
    first = calls[0]
    if any(call.op != first.op for call in calls):
        return "op"
    if _same_shapes(first) and any(call.shapes != first.shapes for call in calls):
        return "shape"
    typed = [call for call in calls if call.dtypes]
    if typed and first.op in SAME_SHAPES and any(c.dtypes != typed[0].dtypes for c in typed):
        return "dtype"
    return None


def first_divergence(records: dict[int, Record]) -> Divergence | None:
    """The first call, on any group, where the ranks with a record disagree; None when
    every group's calls agree (or fewer than two ranks have a record)."""
    usable = {rank: rec for rank, rec in records.items() if not rec.missing}
    if len(usable) < 2:
        return None
    found: list[tuple[int, Divergence]] = []
    for group in _groups(usable).values():
        members = _members(group, usable)
        if len(members) < 2:
            continue
        divergence = _in_group(group, {rank: usable[rank] for rank in members})
        if divergence is not None:
            made = [c.created_ns for c in divergence.calls.values() if c is not None]
            found.append((min(made, default=0), divergence))
    if not found:
        return None
    # calls made within a second of the earliest are a race, not an order: the same test
    # is told the same way each run (a call that differs before one that is missing,
    # then the default group, then the others by name)
    earliest = min(made for made, _ in found)
    close = [d for made, d in found if made - earliest < 1_000_000_000]
    return min(
        close, key=lambda d: (d.kind == "missing", d.group.name != DEFAULT_GROUP, d.group.name)
    )


def _in_group(group: Group, records: dict[int, Record]) -> Divergence | None:
    sequences = {rank: rec.on(group.name) for rank, rec in records.items()}
    start = max((rec.first_kept.get(group.name, 1) for rec in records.values()), default=1)
    last = max((max(seq, default=0) for seq in sequences.values()), default=0)
    lines_from: int | None = None
    earlier: dict[int, Call] = {}
    for seq in range(start, last + 1):
        calls = {rank: sequence.get(seq) for rank, sequence in sequences.items()}
        present = [call for call in calls.values() if call is not None]
        if not present:
            continue
        kind = "missing" if len(present) < len(calls) else _differs(present)
        if kind is not None:
            counts = {rank: sum(1 for s in seqs if s >= start) for rank, seqs in sequences.items()}
            skipped = _skipped(calls, {rank: seqs.get(seq + 1) for rank, seqs in sequences.items()})
            if skipped:
                kind = "skipped"
            return Divergence(group, seq, kind, calls, counts, lines_from, earlier, skipped)
        sites = {call.site for call in present}
        if lines_from is None and len(sites) > 1 and "" not in sites:
            lines_from = seq
            earlier = {rank: call for rank, call in calls.items() if call is not None}
    return None


def _alike(one: Call | None, other: Call | None) -> bool:
    return (
        one is not None
        and other is not None
        and (one.op, one.shapes, one.dtypes, one.site)
        == (other.op, other.shapes, other.dtypes, other.site)
    )


def _skipped(calls: dict[int, Call | None], following: dict[int, Call | None]) -> dict[int, int]:
    """Rank -> the rank whose call it never made: its call of this number is the same
    call (op, tensors, line) as that rank's next one, and differs from that rank's own."""
    found = {}
    for rank, call in calls.items():
        for other, theirs in following.items():
            if other != rank and _alike(call, theirs) and not _alike(call, calls[other]):
                found[rank] = other
                break
    return found


def deadlock(
    records: dict[int, Record], running: set[int]
) -> tuple[tuple[int, str, int, str], ...]:
    """When every running rank waits in a collective and none of those collectives can
    ever complete, what each waits in (``(rank, group, seq, op)``, sorted); else ().

    A waiting collective can complete only when every member of its group is still
    running and waits in the same call number with the same op (and, where the op needs
    it, the same shapes). A rank with nothing to wait in (busy in its own code, in a
    point-to-point op, or without a record) might still release the others: then ()."""
    if not running or any(rank not in records or records[rank].missing for rank in running):
        return ()
    groups = _groups({rank: records[rank] for rank in running})
    waiting = {rank: records[rank].waiting() for rank in running}
    if any(not calls for calls in waiting.values()):
        return ()
    blocked: list[tuple[int, str, int, str]] = []
    for rank, calls in waiting.items():
        for name, call in calls.items():
            group = groups.get(name)
            if group is None or not group.ranks:
                return ()  # members unknown: it might complete
            if _can_complete(call, group, waiting, running):
                return ()
            blocked.append((rank, name, call.seq, call.op))
    return tuple(sorted(blocked))


def _can_complete(
    call: Call, group: Group, waiting: dict[int, dict[str, Call]], running: set[int]
) -> bool:
    peers = []
    for member in group.ranks:
        if member not in running:
            return False  # it finished the test or died: it will never join
        theirs = waiting[member].get(group.name)
        if theirs is None or theirs.seq != call.seq:
            return False
        peers.append(theirs)
    return _differs(peers) is None
