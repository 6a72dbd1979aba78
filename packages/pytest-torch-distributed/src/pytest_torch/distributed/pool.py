"""The rank pool: N child processes, each a rank with its own pytest session, kept from
test to test and replaced whenever a test disturbed it.

The controller hosts the rendezvous (a ``TCPStore`` on a port the OS picks, so two
pools, two xdist workers or two pytest runs never collide), starts the ranks, hands
each test to every rank and watches them: a rank that dies is noticed at once (its
pipe closes), a rank still busy after the test's timeout — or a few seconds after
another rank failed — has its Python stack dumped (``faulthandler`` on SIGUSR1) and
the pool is stopped. A stopped or disturbed pool is never reused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, cast

from pytest_torch.distributed import protocol as msg
from pytest_torch.distributed.groups import c10d
from pytest_torch.distributed.processes import describe_exit, stop
from pytest_torch.distributed.stacks import (
    Frame,
    collective,
    crash_report,
    main_stack,
    read_when_written,
)

#: how long ranks may take to start (import torch, collect) before the pool gives up
START_TIMEOUT_S = 300.0
#: once one rank failed, how long the others get to finish before they are stopped
FAIL_FAST_GRACE_S = 5.0
#: how long a rank gets to write its stack after SIGUSR1
STACK_WAIT_S = 5.0
#: once every other rank finished the test, how long the last one may run before its
#: stack is looked at, and how long after that it must still wait in the same collective
#: to be failed at once: its peers left their process group, so no collective it waits
#: in can complete (a rank still busy in its own code is left to the test's timeout)
ALONE_AFTER_S = 5.0
ALONE_CONFIRM_S = 2.0
#: ... and use at most this share of one core meanwhile: a rank blocked in a collective
#: sleeps, one that calls collectives on a group of its own in a loop does not
ALONE_MAX_CPU = 0.1
LOG_TAIL_LINES = 25


class PoolStartError(RuntimeError):
    """The ranks could not be started; the message says which rank and why."""


@dataclass
class RankState:
    """What one rank did during one test."""

    rank: int
    phases: list[msg.Phase] = field(default_factory=list)
    done: bool = False
    disturbed: str = ""
    #: exit status when the rank died during the test
    returncode: int | None = None
    stack: list[Frame] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)
    #: the native crash in the rank's log, if it wrote one
    crash: list[str] = field(default_factory=list)
    #: what a rank that died wrote during the test (pytest had captured it)
    captured: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(p.outcome == "failed" for p in self.phases)

    @property
    def last_when(self) -> str | None:
        return self.phases[-1].when if self.phases else None


@dataclass
class RankRun:
    """One test on every rank: how it ended, and each rank's part."""

    nodeid: str
    ranks: list[RankState]
    #: "done", "died", "timeout" (the test's timeout), "stopped" (after a failure) or
    #: "alone" (the last rank waits in a collective its finished peers never joined)
    ending: str = "done"
    #: for "alone": seconds since the other ranks had finished the test
    alone_s: float = 0.0
    waited_s: float = 0.0
    #: when the first rank failed or died, seconds into the test
    failed_s: float = 0.0

    @property
    def needs_new_pool(self) -> bool:
        return self.ending != "done" or any(r.disturbed for r in self.ranks)


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen[bytes]
    to_rank: Connection
    from_rank: Connection
    log: Path
    stack_file: Path
    main_thread: int = 0
    alive: bool = True

    @property
    def capture_dir(self) -> Path:
        return self.log.with_name(f"rank{self.rank}-captured")


class RankPool:
    """``world_size`` ranks on ``devices`` (one per rank), started by :meth:`start`."""

    def __init__(
        self,
        world_size: int,
        backend: str,
        devices: list[str],
        workdir: Path,
        setup: Callable[[int, str, int, Path], msg.Setup],
        live_output: bool = False,
        cwd: Path | None = None,
    ) -> None:
        #: where the ranks start: pytest's own starting folder, wherever a test has
        #: since left the current directory (the command line's paths are relative to it)
        self.cwd = cwd
        #: the ranks write to pytest's own output (``-s``) instead of their logs
        self.live_output = live_output
        self.world_size = world_size
        self.backend = backend
        self.devices = devices
        self.workdir = workdir
        self._setup = setup
        self._ranks: list[_Rank] = []
        self._store: Any = None
        self._seq = 0
        self._test_began = 0.0
        self.started_s = 0.0
        self.missing: dict[str, tuple[str, str]] = {}

    # -- start and stop ------------------------------------------------------------

    def start(self) -> None:
        dist = c10d()
        begun = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        try:
            for rank in range(self.world_size):
                self._ranks.append(self._spawn(rank))
            self._await_ready()
        except BaseException:
            self.close(graceful=False)
            raise
        self.started_s = time.monotonic() - begun

    def _spawn(self, rank: int) -> _Rank:
        to_rank_r, to_rank_w = os.pipe()
        from_rank_r, from_rank_w = os.pipe()
        log = self.workdir / f"rank{rank}.log"
        stack_file = self.workdir / f"rank{rank}.stack"
        stack_file.write_text("")
        env = dict(os.environ)
        code = "from pytest_torch.distributed.rank_main import main; main()"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", code, str(to_rank_r), str(from_rank_w), str(os.getpid())],
                pass_fds=(to_rank_r, from_rank_w),
                stdin=subprocess.DEVNULL,
                stdout=None if self.live_output else out,
                stderr=None if self.live_output else subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        os.close(to_rank_r)
        os.close(from_rank_w)
        handle = _Rank(
            rank,
            process,
            Connection(to_rank_w, readable=False),
            Connection(from_rank_r, writable=False),
            log,
            stack_file,
        )
        setup = self._setup(rank, self.devices[rank], int(self._store.port), stack_file)
        handle.to_rank.send(replace(setup, capture_dir=str(handle.capture_dir)))
        return handle

    def _await_ready(self) -> None:
        waiting = {r.rank: r for r in self._ranks}
        deadline = time.monotonic() + START_TIMEOUT_S
        while waiting:
            for rank in list(waiting.values()):
                if rank.process.poll() is not None:
                    raise PoolStartError(self._start_failure(rank))
            ready = wait([r.from_rank for r in waiting.values()], timeout=0.2)
            for handle in [r for r in waiting.values() if r.from_rank in ready]:
                try:
                    answer = handle.from_rank.recv()
                except (EOFError, OSError):
                    stop(handle.process, 5.0)
                    raise PoolStartError(self._start_failure(handle)) from None
                if isinstance(answer, msg.Broken):
                    raise PoolStartError(f"rank {handle.rank} could not start: {answer.text}")
                if isinstance(answer, msg.Ready):
                    handle.main_thread = answer.main_thread
                    self.missing.update(answer.missing)
                    del waiting[handle.rank]
            if waiting and time.monotonic() > deadline:
                raise PoolStartError(
                    f"rank(s) {', '.join(map(str, sorted(waiting)))} of {self.world_size} did not"
                    f" start within {START_TIMEOUT_S:.0f} s (importing torch and collecting the"
                    f" tests); their output is in {self.workdir}"
                )

    def _start_failure(self, rank: _Rank) -> str:
        code = rank.process.poll()
        log = read_log(rank.log)
        shown = "\n".join(tail(log))
        exited = describe_exit(code, log=log)
        return f"rank {rank.rank} {exited} while starting. Its output:\n{shown}"

    def close(self, graceful: bool = True) -> None:
        """Stop every rank (politely first when ``graceful``) and the rendezvous."""
        for rank in self._ranks:
            if graceful and rank.alive and rank.process.returncode is None:
                with contextlib.suppress(OSError, ValueError):
                    rank.to_rank.send(msg.Stop())
        deadline = time.monotonic() + (5.0 if graceful else 0.0)
        for rank in self._ranks:
            stop(rank.process, max(0.0, deadline - time.monotonic()))
            for conn in (rank.to_rank, rank.from_rank):
                with contextlib.suppress(OSError):
                    conn.close()
        self._ranks = []
        self._store = None

    @property
    def pids(self) -> list[int]:
        return [r.process.pid for r in self._ranks]

    # -- one test ------------------------------------------------------------------

    def run(self, nodeid: str, timeout: float) -> RankRun:
        """Run ``nodeid`` on every rank and watch it until every rank is done, one dies,
        the timeout passes, or the others overrun a failure by the grace period."""
        self._seq += 1
        seq = self._seq
        run = RankRun(nodeid, [RankState(r.rank) for r in self._ranks])
        for rank in self._ranks:
            # the process group's own timeout is longer than ours: the controller sees
            # the hang first and dumps each rank's stack while it is still there
            rank.to_rank.send(msg.Run(seq, nodeid, timeout + 60.0))
        begun = time.monotonic()
        self._test_began = time.time()
        try:
            self._watch(run, seq, timeout, begun)
        except BaseException:  # Ctrl-C while the ranks run: stop them at once
            self.close(graceful=False)
            raise
        if run.ending != "done":
            self._dump_stacks(run)
            self.close(graceful=False)
        return run

    def _watch(self, run: RankRun, seq: int, timeout: float, begun: float) -> None:
        """Receive until every rank is done; or until the others had the grace period to
        finish after a rank failed or died; or until the timeout."""
        failed_at: float | None = None
        alone_at: float | None = None  # when every rank but one had finished
        probed_at = 0.0
        waiting_in: str | None = None  # the collective the last rank was seen in
        cpu_then: float | None = None  # its CPU seconds then
        while True:
            self._receive(run, seq, timeout=0.1)
            now = time.monotonic()
            run.waited_s = now - begun
            if all(state.done or state.returncode is not None for state in run.ranks):
                if any(state.returncode is not None for state in run.ranks):
                    run.ending = "died"
                return
            if failed_at is None and any(
                state.failed or state.returncode is not None for state in run.ranks
            ):
                failed_at = now
                run.failed_s = now - begun
            if failed_at is not None and now - failed_at > min(FAIL_FAST_GRACE_S, timeout):
                died = any(state.returncode is not None for state in run.ranks)
                run.ending = "died" if died else "stopped"
                return
            if now - begun > timeout:
                run.ending = "timeout"
                return
            running = [s for s in run.ranks if not s.done and s.returncode is None]
            if failed_at is not None or len(running) != 1 or len(run.ranks) < 2:
                continue
            if alone_at is None:
                alone_at = now
            elif now - alone_at >= ALONE_AFTER_S and now - probed_at >= ALONE_CONFIRM_S:
                state = running[0]
                cpu_now = cpu_seconds(self._ranks[state.rank].process.pid)
                seen = self._probe(state)
                idle = (
                    cpu_now is not None
                    and cpu_then is not None
                    and cpu_now - cpu_then <= ALONE_MAX_CPU * (now - probed_at)
                )
                if seen is not None and seen == waiting_in and idle:
                    run.ending = "alone"
                    run.alone_s = time.monotonic() - alone_at
                    return
                probed_at, waiting_in, cpu_then = now, seen, cpu_now

    def _receive(self, run: RankRun, seq: int, timeout: float) -> None:
        handles = {r.from_rank: r for r in self._ranks if r.alive}
        for ready in wait(list(handles), timeout=timeout):
            conn = cast(Connection, ready)
            handle = handles[conn]
            state = run.ranks[handle.rank]
            try:
                while conn.poll():
                    self._take(state, conn.recv(), seq)
            except (EOFError, OSError):
                handle.alive = False
                stop(handle.process, 2.0)  # its pipe closed: it is gone, or going
                state.returncode = handle.process.returncode
                if state.returncode is None:
                    state.returncode = -signal.SIGKILL
                log = read_log(handle.log)
                state.log_tail = tail(log)
                state.crash = crash_report(log, handle.main_thread)
                state.captured = captured_since(handle.capture_dir, self._test_began)

    @staticmethod
    def _take(state: RankState, answer: object, seq: int) -> None:
        if isinstance(answer, msg.Phase) and answer.seq == seq:
            state.phases.append(answer)
        elif isinstance(answer, msg.Done) and answer.seq == seq:
            state.done = True
            state.disturbed = answer.disturbed
        elif isinstance(answer, msg.Broken):
            state.disturbed = answer.text

    def _probe(self, state: RankState) -> str | None:
        """The collective (with the line that called it) a running rank waits in now, or
        None; its stack is kept for the report."""
        handle = self._ranks[state.rank]
        _ask_for_stack(handle)
        state.stack = _stack_written(handle)
        return collective(state.stack)

    def _dump_stacks(self, run: RankRun) -> None:
        busy = [r for r in self._ranks if r.alive and not run.ranks[r.rank].done]
        for rank in busy:  # all at once: they write while the others are read
            _ask_for_stack(rank)
        for rank in busy:
            run.ranks[rank.rank].stack = _stack_written(rank)


def _ask_for_stack(rank: _Rank) -> None:
    """Have a rank write its stack (``faulthandler`` on SIGUSR1) into its empty file."""
    with contextlib.suppress(OSError):
        rank.stack_file.write_text("")
        os.kill(rank.process.pid, signal.SIGUSR1)


def _stack_written(rank: _Rank) -> list[Frame]:
    """The main thread's stack a rank wrote after :func:`_ask_for_stack`."""
    return main_stack(read_when_written(rank.stack_file, STACK_WAIT_S), rank.main_thread)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process used so far, all its threads (Linux; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def read_log(path: Path) -> str:
    """What a rank wrote to its own output ("" when it wrote nothing there)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def captured_since(folder: Path, since: float, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of what a rank wrote while pytest captured it, in the files its
    capture wrote to since ``since`` (wall-clock seconds)."""
    try:
        files = [p for p in folder.iterdir() if p.stat().st_mtime >= since - 1.0]
    except OSError:
        return []
    text = "".join(read_log(p) for p in sorted(files, key=lambda p: p.stat().st_mtime))
    return tail(text, lines) if text.strip() else []


def tail(log: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last lines of a rank's log."""
    return log.rstrip().splitlines()[-lines:]
