"""Did this process have the machine to itself while it was measured?

A timing taken while something else slowed this process down is slower for reasons that
have nothing to do with the code under test. Two kinds of interference are watched,
between every two samples of a measurement:

- **waiting for a CPU**: how long this process's threads were ready to run but not
  running. On Linux, the run-queue wait of each thread (``/proc/self/task/<tid>/
  schedstat``, second field); sleeping, I/O and waiting for a GPU are not counted, so it
  holds on every device and at every thread count. Elsewhere, for CPU work on one
  thread: the thread's wall time minus its CPU time.
- **a slower core**: a fixed reference loop of pure Python runs before and after each
  sample (twice: the first run refills the caches the measured code evicted) and is
  compared with the fastest it has run in this process. On shared cloud
  machines the core itself slows down for seconds at a time (another tenant on the
  same physical core, power management) without this process waiting at all; the
  loop slows down with it.

A sample that waited, or whose loops ran slower than :data:`SLOWED_LOOP` times the
reference, is set aside. Over the whole measurement, ``/proc/stat`` adds the
hypervisor's steal time and how many cores other processes kept busy.
:class:`Interference` holds the figures and says whether the machine was too busy for
a slow result to be blamed on the code. The thresholds come from measurements
(``benchmarks/perf_busy_machine.py``): on a quiet machine the loop's median is within
4 % of its best and threads wait well under 1 % of the time; with two CPU-bound
neighbours on two cores, they wait a third of the time, and on a host with noisy
tenants the loop runs 1.5 to 2 times slower while the models slow down by 1.3 to 1.5.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

#: a sample that waited for a CPU longer than this share of its own time is set aside
SET_ASIDE_SHARE = 0.05
#: a sample is set aside when the reference loop beside it ran this much slower than
#: its best (its own noise on a quiet machine: 4 % at the 90th percentile)
SLOWED_LOOP = 1.25
#: a measurement is "busy" when its threads waited this share of the sampling time ...
BUSY_WAIT_SHARE = 0.05
#: ... or the hypervisor stole this share of the machine's CPU time ...
BUSY_STEAL_SHARE = 0.05
#: ... or fewer samples than this were left undisturbed
MIN_UNDISTURBED = 3
#: iterations of the reference loop (about 20 µs on a 2020s server core)
LOOP_ITERATIONS = 500


class WaitProbe(Protocol):
    """How long this process has waited for a CPU, as a running total."""

    #: how the wait is measured, for reports
    method: str

    def waited(self) -> float:
        """Seconds waited so far (only differences between readings mean anything)."""
        ...

    def close(self) -> None: ...


class RunQueueProbe:
    """Linux: the summed run-queue wait of this process's threads (schedstat)."""

    method = "run-queue wait"

    def __init__(self, tasks: str = "/proc/self/task") -> None:
        self._files: list[int] = []
        for tid in os.listdir(tasks):
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                self._files.append(os.open(f"{tasks}/{tid}/schedstat", os.O_RDONLY))
        self._last = [0] * len(self._files)
        if not self._files:
            raise OSError(f"no readable schedstat under {tasks}")
        self.waited()

    def waited(self) -> float:
        for index, handle in enumerate(self._files):
            # a thread that ended keeps its last total
            with contextlib.suppress(OSError, IndexError, ValueError):
                self._last[index] = int(os.pread(handle, 128, 0).split()[1])
        return sum(self._last) / 1e9

    def close(self) -> None:
        for handle in self._files:
            os.close(handle)
        self._files = []


class OffCpuProbe:
    """Elsewhere, for CPU work on the calling thread: wall time minus CPU time."""

    method = "wall time minus CPU time"

    def waited(self) -> float:
        return time.perf_counter() - time.thread_time()

    def close(self) -> None:
        pass


def wait_probe(device_type: str, threads: int) -> WaitProbe | None:
    """The best wait probe this platform offers for work on ``device_type`` with
    ``threads`` intra-op threads; None when none can tell."""
    try:
        return RunQueueProbe()
    except OSError:
        pass
    if device_type == "cpu" and threads == 1:
        return OffCpuProbe()
    return None


def reference_loop() -> float:
    """Seconds one run of the fixed reference loop takes now."""
    start = time.perf_counter()
    total = 0
    for i in range(LOOP_ITERATIONS):
        total += i * i
    return time.perf_counter() - start


class LoopReference:
    """The fastest the reference loop has run: the speed of an undisturbed core."""

    def __init__(self) -> None:
        self.best: float | None = None

    def note(self, seconds: float) -> None:
        if seconds > 0 and (self.best is None or seconds < self.best):
            self.best = seconds


#: this process's reference, shared by all its measurements
PROCESS = LoopReference()


def note_reference(seconds: float) -> None:
    """Tell the monitors how fast the reference loop ran on this machine before (as a
    baseline records it), so that a process slow from its start is seen to be slow."""
    PROCESS.note(seconds)


@dataclass(frozen=True)
class Reading:
    """What the monitor saw between two samples."""

    waited: float  # running total of seconds waited for a CPU (0 without a probe)
    loop: float  # seconds the reference loop took just now


@dataclass(frozen=True)
class MachineReading:
    """The machine's CPU time counters and this process's CPU time, at one moment."""

    busy_s: float  # all CPUs, not counting steal
    steal_s: float
    total_s: float
    process_s: float
    wall_s: float


def read_machine(stat: str = "/proc/stat") -> MachineReading | None:
    """Linux's ``/proc/stat`` totals; None where there is no such file."""
    try:
        with open(stat, encoding="ascii") as handle:
            fields = handle.readline().split()
        ticks = [int(value) for value in fields[1:]]
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if fields[:1] != ["cpu"] or len(ticks) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    busy = user + nice + system + irq + softirq
    return MachineReading(
        busy_s=busy / hertz,
        steal_s=steal / hertz,
        total_s=(busy + idle + iowait + steal) / hertz,
        process_s=time.process_time(),
        wall_s=time.perf_counter(),
    )


@dataclass(frozen=True)
class Interference:
    """What interference cost one measurement, with the figures that show it."""

    #: how waiting was measured ("run-queue wait", ...; "" when it was not)
    method: str
    #: share of the sampling time this process's threads spent waiting for a CPU
    waited_share: float
    #: samples set aside (waited, or slowed core), and samples taken in all
    set_aside: int
    samples: int
    #: of the set-aside samples, those set aside because the core ran slow
    slowed: int = 0
    #: the reference loop's slowest run beside a sample, over its best (1.0: never slow)
    loop_ratio: float = 1.0
    #: share of the machine's CPU time the hypervisor took (None: unknown)
    steal_share: float | None = None
    #: cores other processes kept busy on average (None: unknown)
    others_cores: float | None = None
    cores: int = 0
    #: the reference loop's best on this machine when the measurement ended, in seconds
    reference_loop_s: float | None = None

    @property
    def undisturbed(self) -> int:
        return self.samples - self.set_aside

    @property
    def busy(self) -> bool:
        """Too disturbed for a slow result to be blamed on the code."""
        return (
            self.waited_share >= BUSY_WAIT_SHARE
            or (self.steal_share or 0.0) >= BUSY_STEAL_SHARE
            or self.undisturbed < MIN_UNDISTURBED
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
            parts.append(
                f"the core ran slow beside {self.slowed} sample{'s' if self.slowed != 1 else ''}"
                f" (a reference loop up to {self.loop_ratio:.1f}x its best)"
            )
        parts.append(f"{self.undisturbed} of {self.samples} samples undisturbed")
        if self.others_cores is not None:
            parts.append(f"other processes kept {self.others_cores:.1f} of {self.cores} cores busy")
        if self.steal_share is not None and self.steal_share >= 0.005:
            parts.append(f"the hypervisor took {100 * self.steal_share:.0f} % (steal time)")
        return "; ".join(parts)


class Monitor:
    """Watches one measurement: a reading between every two samples, then the verdict
    on each sample and the figures of the whole (see the module docstring)."""

    def __init__(
        self,
        probe: WaitProbe | None,
        *,
        loop: Callable[[], float] = reference_loop,
        machine: Callable[[], MachineReading | None] = read_machine,
        cores: int | None = None,
        reference: LoopReference | None = None,
    ) -> None:
        self.probe = probe
        self._loop = loop
        self._machine = machine
        self._cores = cores
        self.reference = PROCESS if reference is None else reference
        self._before: MachineReading | None = None

    def start(self) -> None:
        """Before sampling: the machine's counters, and the loop's speed refreshed."""
        self._before = self._machine()
        for _ in range(10):
            self.reference.note(self._loop())

    def reading(self) -> Reading:
        # twice: the first run refills the caches the measured code evicted
        loop = min(self._loop(), self._loop())
        self.reference.note(loop)
        return Reading(self.probe.waited() if self.probe is not None else 0.0, loop)

    def waited(self, before: Reading, after: Reading, elapsed: float) -> bool:
        return after.waited - before.waited > SET_ASIDE_SHARE * elapsed

    def disturbed(self, before: Reading, after: Reading, elapsed: float) -> bool:
        """Whether the sample between two readings is set aside (it took ``elapsed``)."""
        return self.waited(before, after, elapsed) or self.slowed(before, after)

    def slowed(self, before: Reading, after: Reading) -> bool:
        best = self.reference.best
        return best is not None and max(before.loop, after.loop) > SLOWED_LOOP * best

    def finish(
        self, readings: list[Reading], elapsed: list[float], sampling_s: float
    ) -> tuple[list[bool], Interference]:
        """Which samples to set aside (sample ``k`` lies between readings ``k`` and
        ``k + 1``), and the figures of the measurement."""
        from pytest_torch.core.cpus import available_cores

        after_machine = self._machine()
        aside: list[bool] = []
        slowed = 0
        for k, seconds in enumerate(elapsed):
            before, after = readings[k], readings[k + 1]
            waited_here = self.waited(before, after, seconds)
            slowed += self.slowed(before, after) and not waited_here
            aside.append(self.disturbed(before, after, seconds))
        best = self.reference.best or 1.0
        waited = readings[-1].waited - readings[0].waited if readings else 0.0
        steal = others = None
        cores = self._cores or available_cores()
        if self._before is not None and after_machine is not None:
            total = after_machine.total_s - self._before.total_s
            wall = after_machine.wall_s - self._before.wall_s
            if total > 0:
                steal = max(0.0, (after_machine.steal_s - self._before.steal_s) / total)
            if wall > 0:
                ours = after_machine.process_s - self._before.process_s
                busy = after_machine.busy_s - self._before.busy_s
                others = min(float(cores), max(0.0, (busy - ours) / wall))
        return aside, Interference(
            method=self.probe.method if self.probe is not None else "",
            waited_share=waited / sampling_s if sampling_s > 0 else 0.0,
            set_aside=sum(aside),
            samples=len(elapsed),
            slowed=slowed,
            loop_ratio=max((r.loop for r in readings), default=best) / best,
            steal_share=steal,
            others_cores=others,
            cores=cores,
            reference_loop_s=self.reference.best,
        )

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
