"""The ranks' collective records compared, and said in words, without any rank running:
the first call they disagree on, ranks that all wait where nothing can complete, and
the ranks' warnings merged."""

from __future__ import annotations

import warnings

from pytest_torch.distributed import rank_warnings
from pytest_torch.distributed.collectives import (
    DEFAULT_GROUP,
    Call,
    Group,
    Record,
    deadlock,
    first_divergence,
)
from pytest_torch.distributed.divergence import explain
from pytest_torch.distributed.protocol import RankWarning

WORLD = Group(DEFAULT_GROUP, "default_pg", (0, 1))


def _call(seq: int, op: str = "all_reduce", shape: tuple[int, ...] = (4,), **kw: object) -> Call:
    values = {"dtypes": ("float32",), "site": f"test_x.py:{20 + seq}", "created_ns": seq}
    values.update(kw)
    return Call(DEFAULT_GROUP, seq, op, (shape,), **values)  # type: ignore[arg-type]


def _record(rank: int, *calls: Call, group: Group = WORLD) -> Record:
    return Record(rank, calls, {group.name: group}, {group.name: 1})


def test_agreeing_records_have_no_divergence() -> None:
    records = {rank: _record(rank, _call(1), _call(2)) for rank in (0, 1)}
    assert first_divergence(records) is None


def test_shapes_that_differ_are_named_with_both_ranks() -> None:
    records = {0: _record(0, _call(1, shape=(4,))), 1: _record(1, _call(1, shape=(5,)))}
    divergence = first_divergence(records)
    assert divergence is not None and (divergence.seq, divergence.kind) == (1, "shape")
    explanation = explain(records, {0: "finished the test", 1: "failed"}, set())
    assert explanation is not None and explanation.kind == "shape"
    assert explanation.sentence == (
        "collective #1 on the default group: rank 0 all_reduce float32[4] at test_x.py:21;"
        " rank 1 all_reduce float32[5] at test_x.py:21"
    )


def test_another_op_at_the_same_number_is_the_divergence() -> None:
    records = {
        0: _record(0, _call(1), _call(2, pending=True)),
        1: _record(1, _call(1), _call(2, "broadcast", site="test_x.py:30", pending=True)),
    }
    explanation = explain(records, {}, {0, 1})
    assert explanation is not None and explanation.kind == "op"
    assert explanation.sentence == (
        "collective #2 on the default group: rank 0 all_reduce float32[4] at test_x.py:22"
        " (waiting); rank 1 broadcast float32[4] at test_x.py:30 (waiting)"
    )
    assert explanation.lines[1:] == [
        "      #1  ranks 0, 1  all_reduce float32[4]  at test_x.py:21",
        "  >   #2  rank 0      all_reduce float32[4]  at test_x.py:22  (waiting)",
        "          rank 1      broadcast float32[4]  at test_x.py:30  (waiting)",
    ]


def test_dtypes_differ_only_where_the_op_needs_them_alike() -> None:
    records = {
        0: _record(0, _call(1, dtypes=("float32",))),
        1: _record(1, _call(1, dtypes=("float64",))),
    }
    divergence = first_divergence(records)
    assert divergence is not None and divergence.kind == "dtype"
    # all_gather into a list takes each rank's own size (NCCL); into one tensor it does not
    uneven = {r: _record(r, _call(1, "all_gather", (4 + r,))) for r in (0, 1)}
    assert first_divergence(uneven) is None
    into = {
        r: _record(r, _call(1, "all_gather", (4 + r,), within="all_gather_into_tensor"))
        for r in (0, 1)
    }
    assert first_divergence(into).kind == "shape"  # type: ignore[union-attr]
    # all_to_all takes each rank's own sizes: other shapes are no divergence
    records = {
        0: _record(0, _call(1, "all_to_all", (4,))),
        1: _record(1, _call(1, "all_to_all", (6,))),
    }
    assert first_divergence(records) is None


def test_a_skipped_collective_is_told_by_count_and_by_the_lines_that_differ() -> None:
    # rank 1 skipped the call at line 22: its call at line 23 met rank 0's at line 22
    rank0 = _record(0, _call(1), _call(2), _call(3, site="test_x.py:23", pending=True))
    rank1 = _record(1, _call(1), _call(2, site="test_x.py:23"))
    explanation = explain({0: rank0, 1: rank1}, {1: "finished the test"}, {0})
    assert explanation is not None and explanation.kind == "missing"
    assert explanation.sentence.startswith(
        "collective #3 on the default group: rank 0 all_reduce float32[4] at test_x.py:23"
        " (waiting); rank 1 had called only 2 collectives on the default group when it"
        " finished the test (their lines already differed at #2: rank 0 at test_x.py:22;"
        " rank 1 at test_x.py:23"
    )


def test_a_call_one_rank_skipped_is_named_with_the_call_that_met_it() -> None:
    # rank 1 skipped line 22: its #2 (line 23) is rank 0's #3
    rank0 = _record(0, _call(1), _call(2, shape=(1,)), _call(3, site="test_x.py:23", pending=True))
    rank1 = _record(1, _call(1), _call(2, site="test_x.py:23", pending=True))
    explanation = explain({0: rank0, 1: rank1}, {}, {0, 1})
    assert explanation is not None and explanation.kind == "skipped"
    assert explanation.sentence.endswith(
        "; rank 1 never made rank 0's #2 at test_x.py:22: its own #2 is the call rank 0 made as #3"
    )
    assert explanation.lines[-2:] == [
        "      #3  rank 0      all_reduce float32[4]  at test_x.py:23  (waiting)",
        "          rank 1      (no #3: it had called only 2 collectives on this group)",
    ]


def test_ranks_all_waiting_in_calls_that_cannot_match_are_a_deadlock() -> None:
    waiting = {
        0: _record(0, _call(1, pending=True)),
        1: _record(1, _call(1, "broadcast", pending=True)),
    }
    assert deadlock(waiting, {0, 1}) == (
        (0, DEFAULT_GROUP, 1, "all_reduce"),
        (1, DEFAULT_GROUP, 1, "broadcast"),
    )
    # the same call on both: it may just be slow
    alike = {rank: _record(rank, _call(1, pending=True)) for rank in (0, 1)}
    assert deadlock(alike, {0, 1}) == ()
    # a rank with nothing pending (busy in its own code) might still release the other
    busy = {0: _record(0, _call(1, pending=True)), 1: _record(1)}
    assert deadlock(busy, {0, 1}) == ()
    # a rank without a record: nothing is known, nothing is stopped
    assert deadlock({0: waiting[0], 1: Record(1, missing="no recorder")}, {0, 1}) == ()


def test_a_call_waiting_for_a_rank_that_left_can_never_complete() -> None:
    records = {0: _record(0, _call(1), _call(2, pending=True)), 1: _record(1, _call(1))}
    assert deadlock(records, {0}) == ((0, DEFAULT_GROUP, 2, "all_reduce"),)


def test_a_subgroup_is_compared_among_its_members_only() -> None:
    pair = Group("1", "", (0, 1))
    records = {
        rank: Record(
            rank,
            (
                _call(1),
                Call("1", 1, "all_reduce" if rank == 0 else "all_gather", ((4,),), ("float32",)),
            ),
            {DEFAULT_GROUP: WORLD, "1": pair},
            {DEFAULT_GROUP: 1, "1": 1},
        )
        for rank in (0, 1)
    }
    divergence = first_divergence(records)
    assert divergence is not None and divergence.group == pair and divergence.kind == "op"
    assert explain(records, {}, set()).sentence.startswith(  # type: ignore[union-attr]
        "collective #1 on group 1 (ranks 0, 1): rank 0 all_reduce"
    )


def test_a_warning_raised_on_every_rank_is_one_warning_naming_them() -> None:
    same = RankWarning("builtins", "UserWarning", "lr too high", "test_x.py", 3)
    own = RankWarning("test_x", "MyWarning", "only here", "test_x.py", 5)
    found = rank_warnings.merged({0: (same,), 1: (same, own)}, 2)
    assert [str(w.message) for w in found] == [
        "lr too high (ranks 0, 1 of 2)",
        "only here (rank 1 of 2)",
    ]
    assert found[0].category is UserWarning
    # a class the controller cannot import: a stand-in of the same name, a UserWarning
    assert found[1].category.__name__ == "MyWarning"
    assert issubclass(found[1].category, UserWarning)
    with warnings.catch_warnings(record=True):
        assert rank_warnings.MyWarning is found[1].category


def test_the_recorder_is_found_to_record_gloo_even_with_its_ring_full(monkeypatch) -> None:
    """The ring keeps 2000 calls: a rank that ran more before its first failure still
    keeps a record (counting entries would see no new one)."""
    import datetime

    import torch
    import torch.distributed as dist

    from pytest_torch.distributed import flight

    group = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=10))
    for _ in range(2100):
        group.allreduce([torch.zeros(1)]).wait()
    monkeypatch.setattr(flight, "_covered", {})
    assert flight.covers_gloo()
