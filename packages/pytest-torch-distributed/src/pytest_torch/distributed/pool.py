"""The rank pool: N child processes, each a rank with its own pytest session, kept from
test to test and replaced whenever a test disturbed it.

The controller hosts the rendezvous (a ``TCPStore`` on a port the OS picks, so two
pools, two xdist workers or two pytest runs never collide, and a fresh one per test for
code that opens a process group itself), starts the ranks, hands each test to every
rank and has :mod:`.watchdog` watch them. Once a test went wrong, each living rank's
record of its collectives is read (:class:`~.collectives.Record`), and the stack of
each rank still busy is dumped (``faulthandler`` on SIGUSR1) before the pool is
stopped. A stopped or disturbed pool is never reused.
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
from pytest_torch.distributed.collectives import Record, first_divergence
from pytest_torch.distributed.groups import c10d
from pytest_torch.distributed.processes import describe_exit, stop
from pytest_torch.distributed.stacks import Frame, crash_report, main_stack, read_when_written

#: how long ranks may take to start (import torch, collect) before the pool gives up
START_TIMEOUT_S = 300.0
#: how long a rank gets to write its stack after SIGUSR1
STACK_WAIT_S = 5.0
#: how long a rank's probe thread has to answer for its main thread's stack
PROBE_STACK_WAIT_S = 2.0
#: how long a rank gets to answer a probe for its record (the first read with stacks
#: takes about a second while torch prepares to symbolize them)
RECORD_WAIT_S = 15.0
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
    #: the warnings the test raised in the rank
    warnings: tuple[msg.RankWarning, ...] = ()

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
    #: "done", "died", "timeout" (the test's timeout), "stopped" (after a failure),
    #: "alone" (the last rank waits in a collective its finished peers never joined) or
    #: "stuck" (every rank still running waits in a collective that cannot complete)
    ending: str = "done"
    #: for "alone": seconds since the other ranks had finished the test
    alone_s: float = 0.0
    waited_s: float = 0.0
    #: when the first rank failed or died, seconds into the test
    failed_s: float = 0.0
    #: each living rank's record of the test's collectives, read once the test went wrong
    records: dict[int, Record] = field(default_factory=dict)
    #: for "stuck": what each rank waited in, ``(rank, group, seq, op)``
    stuck: tuple[tuple[int, str, int, str], ...] = ()

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
    probe_to: Connection
    probe_from: Connection
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
        self._probes = 0
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
        probe_r, probe_w = os.pipe()
        answer_r, answer_w = os.pipe()
        theirs = (to_rank_r, from_rank_w, probe_r, answer_w)
        log = self.workdir / f"rank{rank}.log"
        stack_file = self.workdir / f"rank{rank}.stack"
        stack_file.write_text("")
        env = dict(os.environ)
        code = "from pytest_torch.distributed.rank_main import main; main()"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", code, *map(str, theirs), str(os.getpid())],
                pass_fds=theirs,
                stdin=subprocess.DEVNULL,
                stdout=None if self.live_output else out,
                stderr=None if self.live_output else subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        for fd in theirs:
            os.close(fd)
        handle = _Rank(
            rank,
            process,
            Connection(to_rank_w, readable=False),
            Connection(from_rank_r, writable=False),
            log,
            stack_file,
            Connection(probe_w, readable=False),
            Connection(answer_r, writable=False),
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
            for conn in (rank.to_rank, rank.from_rank, rank.probe_to, rank.probe_from):
                with contextlib.suppress(OSError):
                    conn.close()
        self._ranks = []
        self._store = None

    @property
    def pids(self) -> list[int]:
        return [r.process.pid for r in self._ranks]

    # -- one test ------------------------------------------------------------------

    def run(self, nodeid: str, timeout: float, shared_dir: str = "") -> RankRun:
        """Run ``nodeid`` on every rank and watch it until every rank is done, one dies,
        the timeout passes, the others overrun a failure by the grace period, or the
        ranks still running wait in collectives that cannot complete."""
        from pytest_torch.distributed.watchdog import Watchdog

        self._seq += 1
        seq = self._seq
        run = RankRun(nodeid, [RankState(r.rank) for r in self._ranks])
        # the test's own rendezvous: a store used twice by init_process_group() would
        # hand the second group the first one's stale addresses
        test_store = c10d().TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        for rank in self._ranks:
            # the process group's own timeout is longer than ours: the controller sees
            # the hang first and dumps each rank's stack while it is still there
            order = msg.Run(seq, nodeid, timeout + 60.0, int(test_store.port), shared_dir)
            rank.to_rank.send(order)
        self._test_began = time.time()
        try:
            Watchdog(self, run, seq, timeout).watch()
        except BaseException:  # Ctrl-C while the ranks run: stop them at once
            self.close(graceful=False)
            raise
        if run.ending != "done" or any(state.failed for state in run.ranks):
            run.records.update(self._records_of(run))
        if run.ending != "done":
            self.dump_stacks(run)
            self.close(graceful=False)
        del test_store
        return run

    def _records_of(self, run: RankRun) -> dict[int, Record]:
        """The living ranks' records of a test that went wrong: with the test's lines
        where they will be shown (the calls differ, or the run did not end normally)."""
        living = [r.rank for r in self._ranks if r.alive]
        found = self.records(living, stacks=False)
        if run.ending != "done" or first_divergence(found) is not None:
            found.update(self.records(living, stacks=True))
        return found

    def records(
        self, ranks: list[int], stacks: bool, wait: float = RECORD_WAIT_S, active: bool = False
    ) -> dict[int, Record]:
        """The records of the test's collectives that ``ranks`` give within ``wait``
        seconds (asked all at once, so they are read side by side)."""
        answers = self._ask(ranks, lambda number: msg.Probe(number, stacks, active), wait)
        return {rank: answer.record for rank, answer in answers.items()}

    def _ask(
        self, ranks: list[int], request: Callable[[int], object], wait: float
    ) -> dict[int, Any]:
        """Send ``request(number)`` to each of ``ranks``' probe threads at once and
        collect the answers of that number given within ``wait`` seconds, by rank."""
        self._probes += 1
        number = self._probes
        asked = []
        for rank in ranks:
            handle = self._ranks[rank]
            with contextlib.suppress(OSError, ValueError):
                handle.probe_to.send(request(number))
                asked.append(handle)
        found: dict[int, Any] = {}
        deadline = time.monotonic() + wait
        for handle in asked:
            with contextlib.suppress(EOFError, OSError):
                while handle.probe_from.poll(max(0.0, deadline - time.monotonic())):
                    answer = handle.probe_from.recv()
                    if getattr(answer, "number", None) == number:
                        found[handle.rank] = answer
                        break
        return found

    def pid(self, rank: int) -> int:
        return self._ranks[rank].process.pid

    def receive(self, run: RankRun, seq: int, timeout: float) -> None:
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
            state.warnings = answer.warnings
        elif isinstance(answer, msg.Broken):
            state.disturbed = answer.text

    def probe_stack(self, state: RankState) -> list[Frame]:
        """A running rank's stack now (kept for the report)."""
        return self.probe_stacks([state])[state.rank]

    def probe_stacks(self, states: list[RankState]) -> dict[int, list[Frame]]:
        """Running ranks' stacks now, asked all at once (kept for the report)."""
        handles = [self._ranks[state.rank] for state in states]
        return self._stacks(handles, {state.rank: state for state in states})

    def dump_stacks(self, run: RankRun) -> None:
        busy = [r for r in self._ranks if r.alive and not run.ranks[r.rank].done]
        self._stacks(busy, {r.rank: run.ranks[r.rank] for r in busy})

    def _stacks(self, handles: list[_Rank], states: dict[int, RankState]) -> dict[int, list[Frame]]:
        """Each rank's main-thread stack, asked all at once: read by its probe thread, or
        (a rank whose Python cannot answer: native code holding the interpreter) dumped
        by ``faulthandler`` on SIGUSR1."""
        answers = self._ask([h.rank for h in handles], msg.StackProbe, PROBE_STACK_WAIT_S)
        found = {rank: [Frame(*frame) for frame in a.frames] for rank, a in answers.items()}
        silent = [handle for handle in handles if handle.rank not in found]
        for handle in silent:  # all at once: they write while the others are read
            _ask_for_stack(handle)
        for handle in silent:
            found[handle.rank] = _stack_written(handle)
        for rank, frames in found.items():
            states[rank].stack = frames
        return found


def _ask_for_stack(rank: _Rank) -> None:
    """Have a rank write its stack (``faulthandler`` on SIGUSR1) into its empty file."""
    with contextlib.suppress(OSError):
        rank.stack_file.write_text("")
        os.kill(rank.process.pid, signal.SIGUSR1)


def _stack_written(rank: _Rank) -> list[Frame]:
    """The main thread's stack a rank wrote after :func:`_ask_for_stack`."""
    return main_stack(read_when_written(rank.stack_file, STACK_WAIT_S), rank.main_thread)


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
