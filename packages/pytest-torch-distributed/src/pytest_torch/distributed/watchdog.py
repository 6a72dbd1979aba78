"""Watching one test on a pool's ranks, and deciding when it is over.

The test is over when every rank is done or dead. It is ended early:

- **after a failure**: once a rank failed or died, the others get
  :data:`FAIL_FAST_GRACE_S` to finish;
- **stuck**: every rank still running waits in a collective that can never complete
  (its group's other members finished the test, or wait in another call: another op,
  other shapes, another call number; :func:`~.collectives.deadlock`), while using
  almost no CPU and sitting inside torch, and is found so again a second later;
- **alone** (the rule that needs no record of the collectives, for a torch that keeps
  none): the last rank running sits in the same collective for
  :data:`ALONE_CONFIRM_S` after being alone for :data:`ALONE_AFTER_S`, using almost no
  CPU: its peers have left the group;
- at the test's **timeout**.

A rank busy with its own work, asleep, or in a point-to-point op is never ended early.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pytest_torch.distributed.collectives import deadlock
from pytest_torch.distributed.processes import cpu_seconds
from pytest_torch.distributed.stacks import Frame, collective

if TYPE_CHECKING:
    from pytest_torch.distributed.pool import RankPool, RankRun, RankState

#: once one rank failed, how long the others get to finish before they are stopped
FAIL_FAST_GRACE_S = 5.0
#: how far into a test, and how often, the ranks are looked at for a collective that
#: cannot complete
STUCK_AFTER_S = 2.0
STUCK_EVERY_S = 1.0
#: once every other rank finished the test, how long the last one may run before its
#: stack is looked at, and how long after that it must still wait in the same collective
#: (the rule where the ranks keep no record of their collectives)
ALONE_AFTER_S = 5.0
ALONE_CONFIRM_S = 2.0
#: ... the share of one core a rank may use meanwhile and still count as waiting: a
#: rank blocked in a collective sleeps, one that computes or loops does not
IDLE_MAX_CPU = 0.1
#: how long a waiting rank gets to answer a probe without stacks (a few milliseconds
#: of work for a rank whose test thread waits)
PROBE_WAIT_S = 2.0


class Watchdog:
    def __init__(self, pool: RankPool, run: RankRun, seq: int, timeout: float) -> None:
        self.pool = pool
        self.run = run
        self.seq = seq
        self.timeout = timeout
        self.begun = time.monotonic()
        self._failed_at: float | None = None
        self._looked_at = 0.0
        #: each rule's last look: when, and each running rank's CPU seconds then
        self._cpu: dict[str, tuple[float, dict[int, float | None]]] = {}
        self._stuck: tuple[tuple[int, str, int, str], ...] = ()
        self._recorded = True  # the ranks keep records (until one says it does not)
        self._alone_at: float | None = None
        self._alone_probed = 0.0
        self._alone_in: str | None = None

    def watch(self) -> None:
        """Receive until the test is over (see the module), setting ``run.ending``."""
        run = self.run
        while True:
            self.pool.receive(run, self.seq, timeout=0.1)
            now = time.monotonic()
            run.waited_s = now - self.begun
            if all(state.done or state.returncode is not None for state in run.ranks):
                if any(state.returncode is not None for state in run.ranks):
                    run.ending = "died"
                return
            if self._after_failure(now) or self._timed_out(now):
                return
            if self._failed_at is None and (self._is_stuck(now) or self._is_alone(now)):
                return

    def _after_failure(self, now: float) -> bool:
        run = self.run
        if self._failed_at is None and any(
            state.failed or state.returncode is not None for state in run.ranks
        ):
            self._failed_at = now
            run.failed_s = now - self.begun
        if self._failed_at is not None and now - self._failed_at > min(
            FAIL_FAST_GRACE_S, self.timeout
        ):
            died = any(state.returncode is not None for state in run.ranks)
            run.ending = "died" if died else "stopped"
            return True
        return False

    def _timed_out(self, now: float) -> bool:
        if now - self.begun > self.timeout:
            self.run.ending = "timeout"
            return True
        return False

    def _running(self) -> list[RankState]:
        return [s for s in self.run.ranks if not s.done and s.returncode is None]

    def _idle(self, running: list[RankState], now: float, rule: str) -> bool:
        """Whether every running rank used almost no CPU since ``rule``'s last look."""
        then, before = self._cpu.get(rule, (now, {}))
        spent = {state.rank: cpu_seconds(self.pool.pid(state.rank)) for state in running}
        self._cpu[rule] = (now, spent)
        limit = IDLE_MAX_CPU * (now - then)
        for rank, used in spent.items():
            earlier = before.get(rank)
            if used is None or earlier is None or used - earlier > limit:
                return False
        return now > then

    def _is_stuck(self, now: float) -> bool:
        """Every running rank waits, inside torch, in a collective that cannot complete,
        and did at the last look too."""
        if (
            not self._recorded
            or now - self.begun < STUCK_AFTER_S
            or now - self._looked_at < STUCK_EVERY_S
        ):
            return False
        self._looked_at = now
        running = self._running()
        if not self._idle(running, now, "stuck"):
            self._stuck = ()
            return False
        ranks = [s.rank for s in running]
        records = self.pool.records(ranks, stacks=False, wait=PROBE_WAIT_S, active=True)
        if any(record.missing for record in records.values()):
            self._recorded = False  # this torch keeps none: the older rule below
            return False
        stuck = deadlock(records, set(ranks))
        confirmed = bool(stuck) and stuck == self._stuck
        self._stuck = stuck
        if confirmed and all(map(_inside_torch, self.pool.probe_stacks(running).values())):
            self.run.ending = "stuck"
            self.run.stuck = stuck
            return True
        return False

    def _is_alone(self, now: float) -> bool:
        """The last rank running in the same collective for a while, using almost no CPU,
        after every other rank finished the test (read from its stack alone)."""
        running = self._running()
        if len(running) != 1 or len(self.run.ranks) < 2:
            return False
        if self._alone_at is None:
            self._alone_at = now
            return False
        if now - self._alone_at < ALONE_AFTER_S or now - self._alone_probed < ALONE_CONFIRM_S:
            return False
        state = running[0]
        idle = self._idle(running, now, "alone")
        seen = collective(self.pool.probe_stack(state))
        if seen is not None and seen == self._alone_in and idle and self._alone_probed:
            self.run.ending = "alone"
            self.run.alone_s = time.monotonic() - self._alone_at
            return True
        self._alone_probed, self._alone_in = now, seen
        return False


def _inside_torch(frames: list[Frame]) -> bool:
    """Whether a rank's innermost Python frame is torch's (a collective, DDP's backward,
    FSDP's all-gather), not the test's own code (a sleep, its own loop)."""
    return bool(frames) and "/torch/" in frames[-1].file.replace("\\", "/")
