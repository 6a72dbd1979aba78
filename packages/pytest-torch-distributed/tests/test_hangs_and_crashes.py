"""A rank that dies is reported at once with its exit status; a hang fails after the
timeout with every rank's stack; the next test runs on a fresh pool; no rank outlives
the test run."""

from __future__ import annotations

import pytest

SUITE = """
import os
import time

import pytest
import torch
import torch.distributed as dist
from conftest import note_pid


@pytest.mark.torch_distributed(world_size=2)
def test_1_rank_dies(rank):
    note_pid()
    if rank == 1:
        os._exit(7)
    dist.barrier()


@pytest.mark.torch_distributed(world_size=2, timeout=3)
def test_2_rank_never_joins(rank):
    note_pid()
    if rank == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(120)


@pytest.mark.torch_distributed(world_size=2)
def test_3_next_test_runs(rank):
    note_pid()
    dist.barrier()
"""


def test_death_and_hang_fail_with_what_each_rank_did(run, pytester, rank_pids, still_alive) -> None:
    pytester.makepyfile(test_s=SUITE)
    result = run("-rA")
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_1_rank_dies _*",
            # rank 0, in a barrier, usually fails at once ("then failed in a collective")
            "rank 1 of 2 exited with code 7 during call (* s into the test)*",
            "*- rank 1: died -*",
            "*_ test_2_rank_never_joins _*",
            # what each rank did, and the first call the ranks' records disagree on
            "timed out after 3 s: ranks 0, 1 of 2 did not finish call (rank 0 waiting in"
            " all_reduce float32[[]1] (#1 on the default group), called at test_s.py:22; rank 1"
            " busy at *test_s.py:24 in test_2_rank_never_joins, in no collective); the ranks'"
            " collectives part at collective #1 on the default group: rank 0 all_reduce"
            " float32[[]1] at test_s.py:22 (waiting); rank 1 had called none on the default"
            " group when it was stopped: rank 1 was still in its own code, in no collective:"
            " a step there that is slow or never ends, or a collective skipped on the others,"
            " is the usual cause*",
            "*- rank 0: stopped -*",
            "rank 0 was still running, in all_reduce float32[[]1] (#1 on the default group),"
            " called at test_s.py:22",
            "its Python stack when it was stopped (most recent call last):",
            "  *test_s.py:22 in test_2_rank_never_joins",
            "  */torch/distributed/distributed_c10d.py:* in all_reduce",
            "*rank pools started 3 time(s)*; replaced after a rank died (1), a hang (1)",
            "FAILED test_s.py::test_1_rank_dies - rank 1 of 2 exited with code 7*",
            "FAILED test_s.py::test_2_rank_never_joins - timed out after 3 s*",
        ]
    )
    pids = rank_pids()
    assert len(pids) == 6  # three pools of two ranks
    assert still_alive(pids) == []


def test_a_signal_and_a_native_crash_are_named(run, pytester) -> None:
    pytester.makepyfile(
        test_s="""
        import ctypes
        import os
        import signal

        import pytest
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2)
        def test_crash(rank):
            if rank == 0:
                ctypes.string_at(0)
            dist.barrier()

        @pytest.mark.torch_distributed(world_size=2)
        def test_killed(rank):
            if rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.barrier()
        """
    )
    result = run("-rA")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "rank 0 of 2 was killed by SIGSEGV — a crash in native code during call*",
            "Fatal Python error: Segmentation fault",
            "its Python stack (most recent call last):",
            "  *test_s.py:11 in test_crash",
            "rank 1 of 2 was killed by SIGKILL — the kernel's out-of-memory killer is the usual"
            " cause (see dmesg) during call*",
        ]
    )


def test_what_a_rank_said_before_it_aborted_is_shown(run, pytester) -> None:
    # gloo aborts the process (std::terminate) when the sizes of one collective differ;
    # its message goes to the fd pytest captures during the test
    pytester.makepyfile(
        test_a="""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2)
        def test_shapes_differ(rank):
            dist.all_reduce(torch.ones(4 + rank))
        """
    )
    result = run("-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank ? of 2 was killed by SIGABRT — an abort in native code * during call"
            " (*); it said: *size*; rank ? then failed in a collective, because its peer"
            " had died",
            "what it wrote during the test before it died (last lines):",
            "*what():*",
            "it crashed in a native thread; its main thread was here (most recent call last):",
            "  test_a.py:7 in test_shapes_differ",
        ]
    )


def test_a_collective_the_finished_ranks_never_joined_fails_before_the_timeout(
    run, pytester, monkeypatch
) -> None:
    from pytest_torch.distributed import watchdog

    monkeypatch.setattr(watchdog, "ALONE_AFTER_S", 1.0)  # the pool runs in this process
    monkeypatch.setattr(watchdog, "ALONE_CONFIRM_S", 1.0)
    pytester.makepyfile(
        test_a="""
        import time

        import pytest
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        @pytest.mark.torch_distributed(world_size=2, timeout=50)
        def test_1_only_rank_0_logs_the_loss(rank):
            model = DDP(torch.nn.Linear(4, 1))  # keeps rank 1's connections open
            loss = model(torch.randn(3, 4)).square().mean()
            loss.backward()
            if rank == 0:
                dist.all_reduce(loss.detach())

        @pytest.mark.torch_distributed(world_size=2)
        def test_2_rank_0_works_on_alone(rank):
            own = dist.new_group([0])
            if rank == 0:
                end = time.monotonic() + 4
                t = torch.ones(1)
                while time.monotonic() < end:  # collectives of its own: they complete
                    dist.all_reduce(t, group=own)
                time.sleep(2)  # and in its own code
        """
    )
    result = run("-rA", "-p", "no:randomly")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            # whether rank 0 waits, or its collective breaks as rank 1 leaves, it is named
            # at once, not after the 50 s timeout, with the call rank 1 never made
            "rank 0 of 2 * collective*: collective #5 on the default group: rank 0"
            " all_reduce float32 scalar at test_a.py:14*; rank 1 had called only 4"
            " collectives on the default group when it finished the test*",
            "PASSED test_a.py::test_2_rank_0_works_on_alone",
        ]
    )


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_no_rank_outlives_an_interrupted_or_killed_pytest(
    pytester, rank_pids, still_alive, how
) -> None:
    """Ctrl-C (SIGINT to pytest) stops the ranks on the way out; a pytest killed outright
    takes its ranks with it (the kernel's parent-death signal, and each rank's watcher)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pytester.makepyfile(
        test_s="""
        import time
        import pytest
        from conftest import note_pid

        @pytest.mark.torch_distributed(world_size=2, timeout=300)
        def test_waits(rank):
            note_pid()
            time.sleep(300)
        """
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "torch_distributed",
            "-p",
            "no:randomly",
            "test_s.py",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # a run started in the background (nohup, some CI runners) ignores SIGINT, and so
        # would this pytest: Ctrl-C at a terminal is what is tested
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while len(rank_pids()) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
        pids = rank_pids()
        assert len(pids) == 2, process.communicate(timeout=30)[0].decode()
        os.kill(process.pid, getattr(signal, how))
        try:
            output = process.communicate(timeout=60)[0].decode()
        except subprocess.TimeoutExpired:
            # still running: every thread's stack (pytest's faulthandler on SIGABRT) says where
            os.kill(process.pid, signal.SIGABRT)
            stacks = process.communicate(timeout=30)[0].decode()
            pytest.fail(f"pytest still ran 60 s after {how}; its threads then:\n{stacks}")
    finally:
        if process.poll() is None:
            process.kill()
    assert still_alive(pids) == [], output
    if how == "SIGINT":
        assert "KeyboardInterrupt" in output


def test_a_hung_ranks_stack_is_read_without_a_signal(run, pytester, tmp_path) -> None:
    """The stack comes from the rank's own probe thread: a test's own SIGUSR1 handler
    is left alone, and no signal lands in a process whose native threads are busy."""
    flag = tmp_path / "signalled"
    pytester.makepyfile(
        test_h=f"""
        import signal
        import time

        import pytest


        def waits_for_a_message():
            time.sleep(120)


        @pytest.mark.torch_distributed(world_size=2, timeout=3)
        def test_hangs(rank):
            signal.signal(signal.SIGUSR1, lambda *_: open({str(flag)!r}, "w").close())
            if rank == 1:
                waits_for_a_message()
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "timed out after 3 s: rank 1 of 2 did not finish call*",
            "*- rank 1: stopped -*",
            "its Python stack when it was stopped (most recent call last):",
            "  test_h.py:15 in test_hangs",
            "  test_h.py:8 in waits_for_a_message",
        ]
    )
    assert not flag.exists()
