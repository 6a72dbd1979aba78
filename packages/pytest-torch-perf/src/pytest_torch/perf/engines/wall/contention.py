"""What other processes cost one measurement, sample by sample, with the figures that
show it: how long this process waited, how much slower its core ran, and therefore
how fast the code itself can at most have been.

Two kinds of interference are watched, around every sample:

- **waiting**: time this process's threads were ready to run but not running, or not
  given their CPU by the hypervisor (steal). The measuring thread's CPU clock is read
  right outside each timed block, so its time off the CPU during the block is exact
  (Linux's run-queue figures, ``/proc/self/task/<tid>/schedstat``, lag: a wait begun
  at the system call just before a block is added to the block after it). For work on
  the CPU, time off the CPU is waiting, less what the code itself spends asleep (I/O, a
  data loader's queue), which is found as the low tenth of off-CPU time the run queue
  does not explain; for work on an accelerator, where the thread may sleep until the
  device is done, only what the run queue confirms counts. With intra-op workers, the
  other threads of the process add their run-queue wait.
- **a slowed core**: a fixed loop of pure Python runs between samples, timed on the
  wall clock (runs during which the thread was off its CPU are dropped: they say
  nothing of the core), and is compared with the fastest it has run in this process.
  A slow loop is not yet a slow sample: the loop is far more sensitive than most code
  (beside a busy neighbour it often runs 2x slower while a model runs 1.1x slower), so
  samples beside a slow loop are set aside only when the code itself ran slower beside
  slow loops than beside fast ones (its time less its wait), and count only by that
  much. Samples are taken at several depths of the stack (``layouts.at_depth``): how
  fast interpreted code runs depends on where the stack sits, by each process's
  address layout. Between processes, only a core probe that no layout affects
  (``machine_probes.core_probe``) is compared: a baseline keeps the recording
  process's, and a later process whose core is slower is judged in proportion
  (``settling``); a host that is simply slower is never called busy.

A sample is *undisturbed* when it waited at most :data:`SET_ASIDE_SHARE` of its time
and its core was not slowed. Statistics, verdicts and recordings come from the
undisturbed samples, whatever the share of the whole run that waited, as long as there
are enough of them (:func:`enough_undisturbed`: :data:`MIN_UNDISTURBED` samples adding up
to :data:`MIN_UNDISTURBED_S`). When there are not, the measurement is *busy*: its samples
are upper bounds, and :attr:`generous` figures (a sample's time minus its wait, divided
by its core's slowdown) are the fastest the code can have run. Thresholds and the
behaviour on real machines are measured in ``benchmarks/perf_busy_machine.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_torch.core.cpus import available_cores
from pytest_torch.perf.engines.wall.layouts import LAYOUTS, at_depth, percentile
from pytest_torch.perf.engines.wall.machine_probes import (
    PROCESS,
    PROCESS_CORE,
    LoopReference,
    MachineReading,
    WaitProbe,
    core_probe,
    read_machine,
    reference_loop,
)

#: a sample that waited longer than this share of its own time is set aside
SET_ASIDE_SHARE = 0.05
#: a reference loop this much slower than its best marks a possibly slowed core ...
SLOWED_LOOP = 1.25
#: ... which sets samples aside when the code ran this much slower beside such loops
CODE_SLOWED = 1.05
#: samples beside fast and beside slow loops needed to tell how much a slow core cost
SLOWDOWN_EVIDENCE = 3
#: enough undisturbed samples to judge by (--torch-perf-min-undisturbed's default) ...
MIN_UNDISTURBED = 5
#: ... adding up to at least this much time
MIN_UNDISTURBED_S = 0.02
#: a measurement counts as taken on a busy machine (said in the table when recording)
#: when this share of its samples was set aside, or of its time waited
DISTURBED_SHARE = 0.1
#: steal time from this share of the machine's CPU time on is worth reporting
STEAL_REPORTED = 0.005
#: cores this process's own worker processes must keep busy for their effect to count
OWN_WORKERS = 0.1
#: other processes keeping fewer cores than this busy: nobody else was running
QUIET = 0.2
#: the most a slowed core (or a slower host) is taken to explain: a core shared with a
#: busy sibling thread at a lower clock; the loop's worst reading here was 3.3x
MAX_CORE_FACTOR = 3.0


def enough_undisturbed(
    count: int,
    samples: int,
    seconds: float,
    minimum: int = MIN_UNDISTURBED,
    minimum_s: float = MIN_UNDISTURBED_S,
) -> bool:
    """Whether ``count`` undisturbed samples of ``samples``, adding up to ``seconds``, are
    enough to judge by: all of them, or ``minimum`` adding up to ``minimum_s``. Calls so
    long that few samples fit in the sampling time need half of them (at least two)."""
    if count == samples:
        return True
    return count >= min(minimum, max(2, (samples + 1) // 2)) and seconds >= minimum_s


@dataclass(frozen=True)
class Reading:
    """What the monitor saw between two samples."""

    waited: float  # running total of seconds the measuring thread waited (0 without a probe)
    loop: float | None  # seconds the reference loop took just now (None: no clean run)
    others_waited: float = 0.0  # running total of the other threads' waits


@dataclass(frozen=True)
class Interference:
    """What interference cost one measurement, with the figures that show it."""

    #: how waiting was measured ("run-queue wait", ...; "" when it was not)
    method: str
    #: share of the sampling time this process's threads spent waiting
    waited_share: float
    #: samples set aside (waited, or beside a core that slowed the code), and in all
    set_aside: int
    samples: int
    #: of the set-aside samples, those set aside only because the core ran slow
    slowed: int = 0
    #: the reference loop's slowest run beside a sample its core slowed, over its best
    loop_ratio: float = 1.0
    #: how much slower the code ran beside a slow loop than beside a fast one, where the
    #: samples tell (None: they do not, or no loop ran slow)
    code_slowdown: float | None = None
    #: share of the machine's CPU time the hypervisor took (None: unknown)
    steal_share: float | None = None
    #: cores other processes kept busy on average, this process's descendants (a data
    #: loader's workers) not counted (None: unknown)
    others_cores: float | None = None
    #: cores this process's own descendants kept busy on average (None: unknown)
    own_workers_cores: float | None = None
    cores: int = 0
    #: the reference loop's best in this process when the measurement ended, in seconds
    reference_loop_s: float | None = None
    #: the core probe's best in this process (see machine_probes.core_probe), in seconds
    core_probe_s: float | None = None
    #: seconds the undisturbed samples took, and what counts as enough of them
    undisturbed_s: float = 0.0
    min_undisturbed: int = MIN_UNDISTURBED
    min_undisturbed_s: float = MIN_UNDISTURBED_S
    #: the largest slowdown a set-aside sample was divided by in the generous figures
    core_factor: float = 1.0

    @property
    def undisturbed(self) -> int:
        return self.samples - self.set_aside

    @property
    def busy(self) -> bool:
        """Too few undisturbed samples to judge by: the samples are upper bounds."""
        return not enough_undisturbed(
            self.undisturbed,
            self.samples,
            self.undisturbed_s,
            self.min_undisturbed,
            self.min_undisturbed_s,
        )

    @property
    def disturbed(self) -> bool:
        """Taken on a busy machine: a tenth of the samples waited, or a twentieth of the
        time went to waiting or to steal. Worth saying even where the undisturbed
        samples were enough; a core that ran slow for no visible reason is not a busy
        machine (only its samples are set aside)."""
        return (
            self.set_aside - self.slowed >= DISTURBED_SHARE * self.samples
            or self.waited_share >= DISTURBED_SHARE / 2
            or (self.steal_share or 0.0) >= DISTURBED_SHARE / 2
        )

    def evidence(self) -> str:
        """The figures, in one line."""
        parts = []
        if self.method:
            parts.append(
                f"this process waited for a CPU {100 * self.waited_share:.0f} % of the time"
                f" ({self.method})"
            )
        if self.slowed:
            code = (
                f", the code {self.code_slowdown:.2f}x"
                if self.code_slowdown is not None
                else ", the code by an unknown factor"
            )
            parts.append(
                f"the core ran slow beside {self.slowed} sample{'s' if self.slowed != 1 else ''}"
                f" (a reference loop up to {self.loop_ratio:.1f}x its best{code})"
            )
        parts.append(f"{self.undisturbed} of {self.samples} samples undisturbed")
        if self.others_cores is not None:
            parts.append(f"other processes kept {self.others_cores:.1f} of {self.cores} cores busy")
        if self.own_workers_cores is not None and self.own_workers_cores >= OWN_WORKERS:
            parts.append(
                f"its own worker processes {self.own_workers_cores:.1f} (part of the code)"
            )
        if self.steal_share is not None and self.steal_share >= STEAL_REPORTED:
            parts.append(f"the hypervisor took {100 * self.steal_share:.0f} % (steal time)")
        return "; ".join(parts)


@dataclass(frozen=True)
class Judged:
    """The monitor's account of one measurement's samples."""

    aside: list[bool]
    #: per sample, the fastest the code can have run it: its time less its wait, divided
    #: by its core's slowdown (seconds per sample, as the elapsed times handed in)
    generous: list[float]
    interference: Interference


@dataclass
class _Block:
    wall: float
    off_cpu: float


@dataclass
class Monitor:
    """Watches one measurement: a reading between every two samples, the measuring
    thread's CPU clock around each, then the verdict on each sample and the figures
    of the whole (see the module docstring). Every source is injected for tests."""

    probe: WaitProbe | None
    device_type: str = "cpu"
    #: without a probe: the measuring thread's time off the CPU is all waiting
    off_cpu_waits: bool = False
    #: the work has intra-op workers beside the measuring thread: their waits count too
    #: (otherwise other threads, such as pytest-xdist's, have nothing to do with it)
    workers: bool = False
    loop: Callable[[], float | None] = reference_loop
    core: Callable[[], float | None] = core_probe
    machine: Callable[[], MachineReading | None] = read_machine
    cores: int | None = None
    reference: LoopReference = field(default_factory=lambda: PROCESS)
    core_reference: LoopReference = field(default_factory=lambda: PROCESS_CORE)
    thread_clock: Callable[[], float] = time.thread_time
    wall_clock: Callable[[], float] = time.perf_counter
    readings: list[Reading] = field(default_factory=list, init=False)
    _blocks: list[_Block] = field(default_factory=list, init=False)
    _before: MachineReading | None = field(default=None, init=False)

    @property
    def method(self) -> str:
        if self.probe is not None:
            return self.probe.method
        return "time off the CPU" if self.off_cpu_waits else ""

    def start(self) -> None:
        """Before sampling: the machine's counters, the loop's speed refreshed (at every
        stack depth the samples use), and the first reading."""
        self._before = self.machine()
        for depth in range(LAYOUTS):
            self.reference.note(at_depth(depth, self.loop))
            self.core_reference.note(self.core())
        self.readings.append(self.reading())

    def reading(self) -> Reading:
        # twice: the first run refills the caches the measured code evicted; at the
        # stack depth of the sample just taken (see layouts.at_depth)
        depth = (len(self.readings) - 1) % LAYOUTS
        runs = [at_depth(depth, self.loop) for _ in range(2)]
        loop = min((seconds for seconds in runs if seconds is not None), default=None)
        self.reference.note(loop)
        if self.probe is None:
            return Reading(0.0, loop)
        main, others = self.probe.waited()
        return Reading(main, loop, others)

    def timed(self, block: Callable[[], float]) -> float:
        """Run one timed block (it returns its seconds), then take the next reading.
        The CPU clock, a system call, is read outside the wall clock's readings, so a
        preemption at its return falls outside the block's figures."""
        cpu0 = self.thread_clock()
        wall0 = self.wall_clock()
        seconds = block()
        wall1 = self.wall_clock()
        cpu1 = self.thread_clock()
        wall = wall1 - wall0
        self._blocks.append(_Block(wall, max(0.0, wall - (cpu1 - cpu0))))
        self.readings.append(self.reading())
        return seconds

    def undisturbed(self, index: int, seconds: float) -> bool:
        """A first view of sample ``index`` while sampling (the final one is
        :meth:`finish`'s): whether it waited or ran beside a slow loop."""
        outside = max(0.0, self._blocks[index].wall - seconds)
        waited = max(0.0, self._confirmed_waits(index) - outside)
        return waited <= SET_ASIDE_SHARE * seconds and self.loop_ratio(index) <= SLOWED_LOOP

    def loop_ratio(self, index: int) -> float:
        """How much slower than its best the loop ran beside sample ``index`` (1.0 when
        no clean run of it was seen)."""
        loops = [
            reading.loop
            for reading in (self.readings[index], self.readings[index + 1])
            if reading.loop is not None
        ]
        best = self.reference.best
        return max(loops) / best if loops and best else 1.0

    def _queue_waits(self, index: int) -> tuple[float, float]:
        before, after = self.readings[index], self.readings[index + 1]
        others = after.others_waited - before.others_waited if self.workers else 0.0
        return after.waited - before.waited, others

    def _confirmed_waits(self, index: int) -> float:
        main, others = self._queue_waits(index)
        block = self._blocks[index]
        if self.probe is None:
            return block.off_cpu if self.off_cpu_waits else 0.0
        return min(block.off_cpu, main) + others

    def waits(self) -> list[float]:
        """Seconds each sample waited (see the module docstring)."""
        count = len(self._blocks)
        if self.probe is None or self.device_type != "cpu":
            return [self._confirmed_waits(k) for k in range(count)]
        queued = [self._queue_waits(k) for k in range(count)]
        # off-CPU time the run queue does not explain: the code's own sleep, or steal;
        # its low tenth is the code's (steal comes and goes)
        unexplained = sorted(
            block.off_cpu - main for block, (main, _) in zip(self._blocks, queued, strict=True)
        )
        asleep = max(0.0, unexplained[len(unexplained) // 10]) if unexplained else 0.0
        return [
            max(0.0, block.off_cpu - asleep) + others
            for block, (_, others) in zip(self._blocks, queued, strict=True)
        ]

    def finish(
        self,
        elapsed: list[float],
        sampling_s: float,
        min_undisturbed: int = MIN_UNDISTURBED,
        min_undisturbed_s: float = MIN_UNDISTURBED_S,
    ) -> Judged:
        """Which samples to set aside (sample ``k`` lies between readings ``k`` and
        ``k + 1``), the generous figures, and the figures of the measurement."""
        # a wait outside the timed block (a preemption as it started or ended) lengthens
        # the block's wall time, not the sample: those moments come off first
        waits = [
            max(0.0, wait - max(0.0, block.wall - seconds))
            for wait, block, seconds in zip(self.waits(), self._blocks, elapsed, strict=True)
        ]
        steal, others, cores, own = self._machine_figures()
        if own is not None and own >= OWN_WORKERS and others is not None and others < QUIET:
            # the code's own worker processes (a DataLoader's) kept it waiting for a CPU,
            # and nobody else ran: that wait is the code's, as it would be anywhere
            waits = [0.0] * len(waits)
        waited = [w > SET_ASIDE_SHARE * seconds for w, seconds in zip(waits, elapsed, strict=True)]
        ratios = [self.loop_ratio(k) for k in range(len(elapsed))]
        factors, slowdown = core_factors(
            [seconds - wait for seconds, wait in zip(elapsed, waits, strict=True)], ratios
        )
        aside = [w or f > 1.0 for w, f in zip(waited, factors, strict=True)]
        generous = [
            max(0.0, seconds - wait) / factor
            for seconds, wait, factor in zip(elapsed, waits, factors, strict=True)
        ]
        slowed = [f > 1.0 and not w for w, f in zip(waited, factors, strict=True)]
        return Judged(
            aside=aside,
            generous=generous,
            interference=Interference(
                method=self.method,
                waited_share=sum(waits) / sampling_s if sampling_s > 0 else 0.0,
                set_aside=sum(aside),
                samples=len(elapsed),
                slowed=sum(slowed),
                loop_ratio=max(
                    (r for r, f in zip(ratios, factors, strict=True) if f > 1.0), default=1.0
                ),
                code_slowdown=slowdown,
                steal_share=steal,
                others_cores=others,
                own_workers_cores=own,
                cores=cores,
                reference_loop_s=self.reference.best,
                core_probe_s=self.core_reference.best,
                undisturbed_s=sum(s for s, a in zip(elapsed, aside, strict=True) if not a),
                min_undisturbed=min_undisturbed,
                min_undisturbed_s=min_undisturbed_s,
                core_factor=max(factors, default=1.0),
            ),
        )

    def _machine_figures(self) -> tuple[float | None, float | None, int, float | None]:
        """Steal share, cores other processes kept busy, cores, and cores this
        process's own descendants kept busy, over the measurement."""
        after = self.machine()
        cores = self.cores or available_cores()
        steal = others = own = None
        before = self._before
        if before is not None and after is not None:
            total = after.total_s - before.total_s
            wall = after.wall_s - before.wall_s
            if total > 0:
                steal = max(0.0, (after.steal_s - before.steal_s) / total)
            if wall > 0:
                ours = after.process_s - before.process_s
                # a descendant that ended moves from the live figures to the reaped one
                children = max(0.0, after.descendants_s() - before.descendants_s())
                busy = after.busy_s - before.busy_s
                others = min(float(cores), max(0.0, (busy - ours - children) / wall))
                own = children / wall
        return steal, others, cores, own

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()


def core_factors(times: list[float], ratios: list[float]) -> tuple[list[float], float | None]:
    """How much a slowed core slowed each sample (1.0: not at all), and the code's
    slowdown beside a slow loop where the samples tell it (``times``: each sample's
    time less its wait; ``ratios``: the loop's beside it, over its best).

    The samples beside a slow loop are compared with those beside a fast one (their
    lower quartiles). Where both sides have evidence (three samples each, or a quarter
    of a measurement of few, long samples), that comparison is the code's own slowdown:
    below :data:`CODE_SLOWED` nothing is set aside, above it each such sample counts as
    slowed by it (at most by its loop's ratio). Where they do not, the loop's own ratio
    is all there is to go by (at most :data:`MAX_CORE_FACTOR`).
    """
    slow = [r > SLOWED_LOOP for r in ratios]
    if not any(slow):
        return [1.0] * len(times), None
    fast_times = sorted(t for t, sl in zip(times, slow, strict=True) if not sl)
    slow_times = sorted(t for t, sl in zip(times, slow, strict=True) if sl)
    evidence = min(SLOWDOWN_EVIDENCE, max(1, len(times) // 4))
    if min(len(fast_times), len(slow_times)) < evidence:
        capped = [min(r, MAX_CORE_FACTOR) for r in ratios]
        return [r if sl else 1.0 for r, sl in zip(capped, slow, strict=True)], None
    fast = percentile(fast_times, 25)
    slowdown = percentile(slow_times, 25) / fast if fast > 0 else 1.0
    if slowdown <= CODE_SLOWED:
        return [1.0] * len(times), slowdown
    return [min(slowdown, r) if sl else 1.0 for r, sl in zip(ratios, slow, strict=True)], slowdown
