"""What the interference monitor reads of the machine: how long this process's threads
waited in the run queue (Linux's schedstat), how fast a fixed reference loop and a core
probe run now, the machine's CPU time counters (steal, other processes) and this
process's own descendants' CPU time (a data loader's workers). Plain
readers with no judgement: ``contention`` decides what the readings mean.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: iterations of the reference loop (about 10 to 20 µs on a 2020s server core)
LOOP_ITERATIONS = 500
#: a loop run whose thread was off its CPU for this share of it is no reading of the core
OFF_CPU_LOOP = 0.5


class WaitProbe(Protocol):
    """How long this process's threads have waited for a CPU, as running totals."""

    #: how the wait is measured, for reports
    method: str

    def waited(self) -> tuple[float, float]:
        """Seconds waited so far by the measuring thread, and by all other threads."""
        ...

    def close(self) -> None: ...


class RunQueueProbe:
    """Linux: the run-queue wait of this process's threads (schedstat's second field)."""

    method = "run-queue wait"

    def __init__(self, tasks: str = "/proc/self/task", main: int | None = None) -> None:
        main = threading.get_native_id() if main is None else main
        self._files: list[int] = []
        self._main = -1
        for tid in os.listdir(tasks):
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                handle = os.open(f"{tasks}/{tid}/schedstat", os.O_RDONLY)
                if tid == str(main):
                    self._main = len(self._files)
                self._files.append(handle)
        self._last = [0] * len(self._files)
        if not self._files:
            raise OSError(f"no readable schedstat under {tasks}")
        self.waited()

    def waited(self) -> tuple[float, float]:
        for index, handle in enumerate(self._files):
            # a thread that ended keeps its last total
            with contextlib.suppress(OSError, IndexError, ValueError):
                self._last[index] = int(os.pread(handle, 128, 0).split()[1])
        main = self._last[self._main] if self._main >= 0 else 0
        return main / 1e9, (sum(self._last) - main) / 1e9

    def close(self) -> None:
        for handle in self._files:
            os.close(handle)
        self._files = []


def wait_probe(device_type: str, threads: int) -> WaitProbe | None:
    """The run-queue probe where the platform has one (Linux); None elsewhere (then the
    measuring thread's off-CPU time is its wait for CPU work on one thread, see
    :func:`off_cpu_waits`)."""
    try:
        return RunQueueProbe()
    except OSError:
        return None


def off_cpu_waits(device_type: str, threads: int) -> bool:
    """Without a run-queue probe: whether the measuring thread's time off the CPU is all
    waiting (CPU work on that one thread), or says nothing (workers, a device)."""
    return device_type == "cpu" and threads == 1


def _off_cpu_checked(
    work: Callable[[], object],
    clock: Callable[[], float],
    thread_clock: Callable[[], float],
) -> float | None:
    """Seconds ``work`` takes on the wall clock, which never reads short (the thread's
    CPU clock can: on a virtual machine, steal is taken out of it in lumps); None when
    the thread was off its CPU for much of it (a preemption or steal, which say nothing
    of the core's speed)."""
    cpu0 = thread_clock()
    start = clock()
    work()
    seconds = clock() - start
    if seconds - (thread_clock() - cpu0) > OFF_CPU_LOOP * seconds:
        return None
    return seconds


def _loop() -> None:
    total = 0
    for i in range(LOOP_ITERATIONS):
        total += i * i


def reference_loop(
    clock: Callable[[], float] = time.perf_counter,
    thread_clock: Callable[[], float] = time.thread_time,
) -> float | None:
    """Seconds one run of the fixed reference loop (pure Python) takes now, or None (see
    :func:`_off_cpu_checked`). Sensitive to whatever slows interpreted code, including
    the process's address layout: compared only within a process."""
    return _off_cpu_checked(_loop, clock, thread_clock)


#: what the core probe hashes: 16 KiB, hashed without allocating or interpreting
_PROBE_DATA = bytes(range(256)) * 64


def core_probe(
    clock: Callable[[], float] = time.perf_counter,
    thread_clock: Callable[[], float] = time.thread_time,
) -> float | None:
    """Seconds a SHA-256 of 16 KiB takes now, or None (see :func:`_off_cpu_checked`).

    The speed of the core itself, comparable between processes and hosts: the
    reference loop (interpreted code) runs 1.7x slower in about one process in five for
    its whole life, by its address layout alone, while the hash varies 4 % between
    processes on the same host (benchmarks/perf_busy_machine.py's machine)."""
    return _off_cpu_checked(lambda: hashlib.sha256(_PROBE_DATA).digest(), clock, thread_clock)


class LoopReference:
    """The fastest a probe has run in this process: its core at full speed."""

    def __init__(self) -> None:
        self.best: float | None = None

    def note(self, seconds: float | None) -> None:
        if seconds is not None and seconds > 0 and (self.best is None or seconds < self.best):
            self.best = seconds


#: this process's fastest reference loop, shared by all its measurements (never another
#: process's: the loop's speed depends on each process's address layout)
PROCESS = LoopReference()
#: this process's fastest core probe: what a baseline keeps, to tell a slower host
PROCESS_CORE = LoopReference()


@dataclass(frozen=True)
class MachineReading:
    """The machine's CPU time counters and this process's CPU time, at one moment."""

    busy_s: float  # all CPUs, not counting steal
    steal_s: float
    total_s: float
    process_s: float
    wall_s: float
    #: CPU seconds of each live descendant process (a DataLoader's workers), by pid
    children: Mapping[int, float] = field(default_factory=dict)
    #: CPU seconds of the descendants that ended and were waited for (a DataLoader's
    #: workers that are not persistent end with each epoch)
    reaped_s: float = 0.0

    def descendants_s(self) -> float:
        """CPU seconds of every descendant so far, live and ended."""
        return sum(self.children.values()) + self.reaped_s


#: descendants followed at most (a process tree larger than this is not a test's)
MAX_DESCENDANTS = 256


def descendants_cpu(root: int | None = None, proc: str = "/proc") -> dict[int, float]:
    """CPU seconds (user and system) of every live descendant of ``root`` (this
    process), from Linux's ``/proc/<pid>/task/<tid>/children``; empty elsewhere."""
    try:
        hertz = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return {}
    found: dict[int, float] = {}
    pending = [os.getpid() if root is None else root]
    while pending and len(found) < MAX_DESCENDANTS:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"{proc}/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"{proc}/{pid}/task/{task}/children", encoding="ascii") as handle:
                    kids = [int(kid) for kid in handle.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid in found:
                    continue
                try:
                    with open(f"{proc}/{kid}/stat", encoding="ascii", errors="replace") as handle:
                        fields = handle.read().rsplit(")", 1)[1].split()
                    found[kid] = (int(fields[11]) + int(fields[12])) / hertz
                except (OSError, ValueError, IndexError):
                    continue
                pending.append(kid)
    return found


def _reaped_s() -> float:
    times = os.times()
    return times.children_user + times.children_system


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
        children=descendants_cpu(),
        reaped_s=_reaped_s(),
    )
