"""Each rank's collectives are recorded during a test; when a test fails, hangs or loses
a rank, the report names the first collective the ranks disagree on, and ranks that all
wait in collectives that cannot match are stopped in seconds, not at the timeout."""

from __future__ import annotations

MISMATCHES = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_1_shapes(rank):
    dist.all_reduce(torch.ones(2 + rank))


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_2_ops(rank):
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_3_skipped(rank):
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 0:
        dist.all_reduce(t)
    dist.all_reduce(t)


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_4_dtypes(rank):
    dist.all_reduce(torch.ones(3, dtype=torch.float32 if rank == 0 else torch.float64))
"""


def test_the_first_collective_the_ranks_disagree_on_is_named(run, pytester) -> None:
    pytester.makepyfile(test_c=MISMATCHES)
    result = run("-rA")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    # no mismatch waited for the timeout
    assert "timed out" not in out
    result.stdout.fnmatch_lines(
        [
            # both ranks called the same line with other shapes: no "never joined"
            "rank 1 of 2 failed: the ranks passed tensors of different shapes to the same"
            " collective, collective #1 on the default group: rank 0 all_reduce float32[[]2]"
            " at test_c.py:8; rank 1 all_reduce float32[[]3] at test_c.py:8; rank 1 then"
            " failed in it when rank 0 left it (*); rank 0 passed, but what it received from"
            " that collective is not to be trusted.*",
            "*- rank 1 -*",
            "  at test_c.py:8",
            "*- collectives, side by side -*",
            "  >   #1  rank 0      all_reduce float32[[]2]  at test_c.py:8",
            "          rank 1      all_reduce float32[[]3]  at test_c.py:8",
            # another op at the same point: stopped as soon as both wait
            "ranks 0, 1 of 2 waited in a collective that could never complete (* s into the"
            " test): collective #1 on the default group: rank 0 all_reduce float32[[]4] at"
            " test_c.py:15 (waiting); rank 1 broadcast float32[[]4] at test_c.py:17 (waiting)."
            " The ranks called different collectives at the same point*",
            # a collective skipped on one rank: counted, and the lines that parted shown
            "rank 0 of 2 failed in a collective (called at test_c.py:26) that rank 1 never"
            " joined*collective #3 on the default group: rank 0 all_reduce float32[[]4] at"
            " test_c.py:26; rank 1 had called only 2 collectives on the default group when it"
            " finished the test (their lines already differed at #2: rank 0 at test_c.py:25;"
            " rank 1 at test_c.py:26*",
            "          rank 1      (no #3: it had called only 2 collectives on this group)",
            # gloo aborts the rank that receives more than its tensor holds: the peer's
            # call is named, as the dead rank's record died with it
            "rank 0 of 2 was killed by SIGABRT*Received data size doesn't match expected"
            " size*; rank 1's last collective was #1 on the default group, all_reduce"
            " float64[[]3] at test_c.py:31*",
        ]
    )


WITHIN = """
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_1_raises_mid_ddp(rank):
    model = DDP(nn.Linear(4, 4))
    for step in range(3):
        loss = model(torch.randn(8, 4)).sum()
        if rank == 1 and step == 1:
            raise ValueError("bad batch on rank 1")
        loss.backward()


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_2_object_on_one_rank(rank):
    if rank == 0:
        dist.all_gather_object([None, None], {"rank": rank})
    dist.barrier()


@pytest.mark.torch_distributed(world_size=2, timeout=120)
def test_3_subgroup(rank):
    pair = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(2))
    if rank == 0:
        dist.all_reduce(torch.ones(4), group=pair)
    else:
        dist.all_gather_into_tensor(torch.empty(8), torch.ones(4), group=pair)
"""


def test_collectives_inside_ddp_objects_and_subgroups_are_named(run, pytester) -> None:
    pytester.makepyfile(test_w=WITHIN)
    result = run("-rA")
    result.assert_outcomes(failed=3)
    assert "timed out" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            # the cause first, with its exception; the rank left waiting inside DDP's own
            # gradient all-reduce is labelled by its record
            "rank 1 of 2 failed: ValueError: bad batch on rank 1; rank 0, still running * s"
            " later (waiting in all_reduce float32[[]20] (in backward) (#7 on the default"
            " group), called at test_w.py:15), was stopped (stacks below)",
            "*- rank 1 -*",
            "E * ValueError: bad batch on rank 1",
            "*- rank 0: stopped -*",
            "      #4  ranks 0, 1  all_reduce float32[[]20] (in backward)  at test_w.py:15",
            "  >   #7  rank 0      all_reduce float32[[]20] (in backward)  at test_w.py:15 "
            " (waiting)",
            "          rank 1      (no #7: it had called only 6 collectives on this group)",
            "ranks 0, 1 of 2 waited in a collective that could never complete*: collective #1"
            " on the default group: rank 0 all_gather int64[[]1] (in all_gather_object) at"
            " test_w.py:21 (waiting); rank 1 barrier at test_w.py:22 (waiting)*",
            "ranks 0, 1 of 2 waited in a collective that could never complete*: collective #1"
            " on group 1 (ranks 0, 1): rank 0 all_reduce float32[[]4] at test_w.py:30"
            " (waiting); rank 1 all_gather float32[[]4] (in all_gather_into_tensor) at"
            " test_w.py:32 (waiting)*",
            "FAILED test_w.py::test_1_raises_mid_ddp - rank 1 of 2 failed: ValueError: bad*",
        ]
    )
    # the rank that failed as a consequence comes after the cause, and torch's source of
    # a collective is not shown for it
    out = result.stdout.str()
    section = out[out.index("_ test_1_raises_mid_ddp _") : out.index("_ test_2_object")]
    assert section.index("- rank 1 -") < section.index("- rank 0: stopped -")
    assert "def all_reduce(" not in section


def test_a_record_turned_off_is_said_not_silently_missing(run, pytester, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "0")  # the ranks inherit it
    pytester.makepyfile(
        test_off="""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2)
        def test_only_rank_0_reduces(rank):
            if rank == 0:
                dist.all_reduce(torch.ones(1))
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 0 of 2 failed in a collective (called at test_off.py:8) that rank 1 never"
            " joined*",
            "the ranks kept no record: torch's flight recorder is off (TORCH_FR_BUFFER_SIZE=0)",
        ]
    )
