"""What the ranks' records of their collectives say about a failed test, in words.

:func:`explain` turns the records (:mod:`.collectives`) into a sentence naming the
first call where the ranks parted (``collective #3 on the default group: rank 0
all_reduce float32[4] at test_x.py:21 (waiting); rank 1 broadcast float32[4] at
test_x.py:25``) and a section that shows the group's calls side by side up to there.
Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_torch.distributed.collectives import (
    DEFAULT_GROUP,
    Call,
    Divergence,
    Record,
    first_divergence,
)

#: how the ranks' calls differ, and what usually makes them so
MISMATCH = {
    "op": "the ranks called different collectives at the same point",
    "shape": "the ranks passed tensors of different shapes to the same collective",
    "dtype": "the ranks passed tensors of different dtypes to the same collective",
    "skipped": "a rank skipped a collective the others called",
}
USUAL = {
    "op": "one called on some ranks only, or in another order on each, is the usual cause",
    "shape": "a batch or shard sized differently on each rank is the usual cause",
    "dtype": "a tensor made or cast differently on some ranks is the usual cause",
    "missing": "a collective called on some ranks only (under an `if rank == ...`, or"
    " after an early return or an exception) is the usual cause",
}
USUAL["skipped"] = USUAL["missing"]
ADVICE = {kind: f"{MISMATCH[kind]}: {USUAL[kind]}" for kind in MISMATCH}
ADVICE["missing"] = USUAL["missing"]
#: what to look for when a rank still running is in no collective
OWN_CODE = (
    "in no collective: a step there that is slow or never ends, or a collective skipped"
    " on the others, is the usual cause; raise the timeout with the marker's timeout= or"
    " --torch-distributed-timeout if the test is only slow"
)

#: how many agreeing calls the section shows before the first difference
SHOWN_BEFORE = 6


@dataclass(frozen=True)
class Explanation:
    #: the first difference, as a clause ("" when the calls agree)
    sentence: str
    #: the section's lines (the calls side by side, or what each rank waits in)
    lines: list[str] = field(default_factory=list)
    #: the ranks' calls differ (another op, other shapes or dtypes, fewer calls)
    diverged: bool = False
    #: how they differ: "op", "shape", "dtype", "missing" (a rank had fewer calls) or
    #: "skipped" (a rank skipped a call the others made)
    kind: str = ""
    #: ranks that had not made the call that differs (they may wait in another)
    absent: tuple[int, ...] = ()


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _count(n: int) -> str:
    return "none" if n == 0 else f"only {n} collective{'s' if n != 1 else ''}"


def _variants(calls: dict[int, Call | None]) -> list[tuple[list[int], Call | None]]:
    """Ranks that made the same call, grouped (a call not made is its own variant)."""
    found: dict[tuple[object, ...], tuple[list[int], Call | None]] = {}
    for rank in sorted(calls):
        call = calls[rank]
        key: tuple[object, ...] = (
            ("none",) if call is None else (call.what(), call.site, call.pending)
        )
        found.setdefault(key, ([], call))[0].append(rank)
    return list(found.values())


def _said(ranks: list[int], call: Call, live: bool) -> str:
    waiting = " (waiting)" if call.pending and live else ""
    return f"{_ranks(ranks)} {call.describe()}{waiting}"


def sentence(divergence: Divergence, ended: dict[int, str], running: set[int]) -> str:
    """``collective #3 on the default group: rank 0 ...; rank 1 ...``."""
    where = f"collective #{divergence.seq} on {divergence.group.shown()}"
    parts = []
    for ranks, call in _variants(divergence.calls):
        if call is not None:
            parts.append(_said(ranks, call, any(r in running for r in ranks)))
            continue
        for rank in ranks:
            when = ended.get(rank, "")
            count = _count(divergence.counts.get(rank, 0))
            parts.append(
                f"rank {rank} had called {count} on {divergence.group.shown()}"
                + (f" when it {when}" if when else "")
            )
    text = f"{where}: {'; '.join(parts)}"
    for rank, other in sorted(divergence.skipped.items()):
        theirs = divergence.calls[other]
        site = f" at {theirs.site}" if theirs is not None and theirs.site else ""
        text += (
            f"; rank {rank} never made rank {other}'s #{divergence.seq}{site}: its own"
            f" #{divergence.seq} is the call rank {other} made as #{divergence.seq + 1}"
        )
    if divergence.lines_differ_from is not None:
        earlier = "; ".join(
            f"{_ranks(ranks)} at {call.site}"
            for ranks, call in _variants(dict(divergence.earlier))
            if call is not None
        )
        text += (
            f" (their lines already differed at #{divergence.lines_differ_from}: {earlier};"
            " a collective called on some ranks only, matched by the next one of the same"
            " kind, is the usual cause)"
        )
    return text


def section(divergence: Divergence, records: dict[int, Record], running: set[int]) -> list[str]:
    """The group's calls side by side, up to the first difference (marked ``>``)."""
    group = divergence.group
    members = [rank for rank in (group.ranks or sorted(records)) if rank in records]
    sequences = {rank: records[rank].on(group.name) for rank in members}
    start = max(
        divergence.seq - SHOWN_BEFORE, *(r.first_kept.get(group.name, 1) for r in records.values())
    )
    lines = [f"{group.shown()}, each rank's calls in order (the first difference marked >):"]
    if start > 1:
        lines.append(
            f"    ... {start - 1} earlier call"
            + ("s agree or are not kept" if start > 2 else " agrees or is not kept")
        )
    width = max(len(_ranks(members)), 7)
    last = divergence.seq + (1 if divergence.skipped else 0)  # show the call that matched
    for seq in range(start, last + 1):
        calls = {rank: sequences[rank].get(seq) for rank in members}
        mark = ">" if seq == divergence.seq else " "
        number = f"#{seq}"
        for index, (ranks, call) in enumerate(_variants(calls)):
            head = f"  {mark} {number:>4}" if index == 0 else " " * 8
            if call is None:
                count = _count(divergence.counts.get(ranks[0], 0))
                who = "they" if len(ranks) > 1 else "it"
                what = f"(no #{seq}: {who} had called {count} on this group)"
            else:
                waiting = "  (waiting)" if call.pending and any(r in running for r in ranks) else ""
                what = call.what() + (f"  at {call.site}" if call.site else "") + waiting
            lines.append(f"{head}  {_ranks(ranks):<{width}}  {what}")
    return lines


def waiting_in(records: dict[int, Record], running: set[int]) -> list[str]:
    """What each running rank waits in, by its record: ``rank 0: #5 all_reduce
    float32[4] at test_x.py:3 on the default group``."""
    lines = []
    for rank in sorted(running):
        record = records.get(rank)
        if record is None or record.missing:
            continue
        for call in record.waiting().values():
            group = record.group_of(call).shown()
            lines.append(f"rank {rank} waits in #{call.seq} on {group}: {call.describe()}")
    return lines


def explain(
    records: dict[int, Record], ended: dict[int, str], running: set[int]
) -> Explanation | None:
    """The first difference between the ranks' calls, or what the running ranks wait in
    when their calls agree; None when no rank kept a record."""
    usable = {rank: rec for rank, rec in records.items() if not rec.missing}
    if not usable:
        return None
    divergence = first_divergence(usable)
    if divergence is not None:
        return Explanation(
            sentence(divergence, ended, running),
            section(divergence, usable, running),
            diverged=True,
            kind=divergence.kind,
            absent=tuple(rank for rank, call in sorted(divergence.calls.items()) if call is None),
        )
    waits = waiting_in(usable, running)
    if not waits:
        return None
    calls = {
        rank: len([c for c in rec.calls if c.group == DEFAULT_GROUP])
        for rank, rec in usable.items()
    }
    counts = ", ".join(f"rank {rank}: {n}" for rank, n in sorted(calls.items()))
    agree = f"the ranks' collectives agree ({counts} on the default group)"
    return Explanation("", [agree + "; now:", *(f"  {line}" for line in waits)])


def missing_records(records: dict[int, Record]) -> str:
    """Why the ranks kept no record, once ("" when they did)."""
    whys = sorted({rec.missing for rec in records.values() if rec.missing})
    return "; ".join(whys)
