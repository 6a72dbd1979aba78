"""Measuring how long a model or a callable takes, so that noise does not decide.

The first call (which may compile, allocate or autotune) is timed and reported apart.
Then warm-up runs until consecutive timings agree, then samples are taken until their
spread is tight or a time cap is hit. Calls too short to time one by one are grouped
into blocks. The device is synchronized (or timed with device events) through the
core device layer, under whatever thread count is in force (``calls`` sets one).

With an interference monitor (``contention.py``), each sample also records how long
this process waited meanwhile and how fast its core ran: disturbed samples are set
aside, sampling goes on (up to ``busy_max_time``) until enough undisturbed ones are
in, and the result carries the figures of the interference and, per sample, the
fastest the code can have run it (``generous_ms``).

``torch.utils.benchmark.Timer`` is the closest tool; it times code strings under a
thread count it sets itself (one by default), does not report the first call, and
synchronizes only CUDA. The benchmarks compare the two side by side.
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from pytest_torch.perf.engines.wall.contention import (
    MIN_UNDISTURBED_S,
    Interference,
    Monitor,
    enough_undisturbed,
)
from pytest_torch.perf.engines.wall.layouts import LAYOUTS, at_depth, percentile

STATISTICS = ("median", "mean", "min", "p90", "p99")


class Timer(Protocol):
    """What the engine needs from a device stopwatch (see ``devices.Stopwatch``)."""

    def start(self) -> None: ...

    def stop(self) -> float: ...


@dataclass(frozen=True)
class SamplingSettings:
    """How hard the engine tries. Times in seconds."""

    #: cap on the sampling phase (warm-up has its own cap)
    max_time: float = 1.0
    #: stop early once the interquartile range is at most this share of the median
    target_spread: float = 0.05
    min_samples: int = 7
    max_samples: int = 10_000
    #: cap on warm-up, in time and in calls
    warmup_max_time: float = 0.5
    warmup_max_calls: int = 50
    #: calls are grouped so that one sample lasts at least this long
    min_sample_time: float = 1e-3
    #: undisturbed samples a measurement needs to be judged by them (they must also add
    #: up to ``contention.MIN_UNDISTURBED_S``) ...
    min_undisturbed: int = 5
    #: ... and the cap on sampling while they are too few (at least ``max_time``)
    busy_max_time: float = 3.0

    def __post_init__(self) -> None:
        if not self.max_time > 0:
            raise ValueError(f"max_time must be positive, got {self.max_time}")
        if not self.busy_max_time > 0:
            raise ValueError(f"busy_max_time must be positive, got {self.busy_max_time}")
        if self.min_undisturbed < 1:
            raise ValueError(f"min_undisturbed must be at least 1, got {self.min_undisturbed}")
        if not 0 < self.target_spread < 1:
            raise ValueError(f"target_spread must be in (0, 1), got {self.target_spread}")


@dataclass(frozen=True)
class LatencyResult:
    """Timings of one measurement, in milliseconds per call."""

    samples_ms: tuple[float, ...]
    first_call_ms: float
    warmup_calls: int
    calls_per_sample: int
    device: str
    threads: int
    #: why sampling stopped: "spread" (tight enough), "time cap" or "max samples"
    stopped_by: str
    #: samples set aside because this process waited during them or its core ran slow
    #: (not in ``samples_ms`` unless too few were left: then every sample is there)
    set_aside_ms: tuple[float, ...] = ()
    #: what other processes cost this measurement; None without a monitor
    interference: Interference | None = None
    #: per sample (all of them, set aside or not), the fastest the code can have run:
    #: its time less its wait, divided by its core's slowdown; empty without a monitor
    generous_ms: tuple[float, ...] = ()
    _sorted: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.samples_ms:
            raise ValueError("a LatencyResult needs at least one sample")
        object.__setattr__(self, "_sorted", sorted(self.samples_ms))

    @property
    def busy(self) -> bool:
        """Too few undisturbed samples to judge by: the statistics are upper bounds (see
        :class:`~pytest_torch.perf.engines.wall.contention.Interference`)."""
        return self.interference is not None and self.interference.busy

    def generous(self, name: str) -> float:
        """The statistic ``name`` over the generous figures: the fastest the code can
        have run, taking out every wait and core slowdown seen (the statistic itself
        without a monitor)."""
        if not self.generous_ms:
            return self.stat(name)
        return LatencyResult(self.generous_ms, 0.0, 0, 1, self.device, self.threads, "").stat(name)

    @property
    def runs(self) -> int:
        """Number of samples (each the mean of ``calls_per_sample`` calls)."""
        return len(self.samples_ms)

    @property
    def median(self) -> float:
        return percentile(self._sorted, 50)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_ms)

    @property
    def min(self) -> float:
        return self._sorted[0]

    @property
    def max(self) -> float:
        return self._sorted[-1]

    @property
    def p10(self) -> float:
        return percentile(self._sorted, 10)

    @property
    def p90(self) -> float:
        return percentile(self._sorted, 90)

    @property
    def p99(self) -> float:
        return percentile(self._sorted, 99)

    @property
    def iqr(self) -> float:
        return percentile(self._sorted, 75) - percentile(self._sorted, 25)

    @property
    def spread(self) -> float:
        """IQR as a share of the median: 0.05 means the middle half lies within 5 %."""
        return self.iqr / self.median if self.median > 0 else 0.0

    def stat(self, name: str) -> float:
        """One of ``median``, ``mean``, ``min``, ``p90``, ``p99`` (also p10, max, iqr)."""
        if name not in (*STATISTICS, "p10", "max", "iqr"):
            raise ValueError(f"unknown statistic {name!r}; expected one of {', '.join(STATISTICS)}")
        return float(getattr(self, name))

    def describe(self) -> str:
        """One line: the distribution, how it was taken, and where."""
        calls = "call" if self.calls_per_sample == 1 else "calls"
        aside = ""
        found = self.interference
        if found is not None and found.set_aside:
            why = ", ".join(
                f"{count} {reason}"
                for count, reason in (
                    (found.set_aside - found.slowed, "waited for a CPU"),
                    (found.slowed, "beside a slowed core"),
                )
                if count
            )
            if self.runs == found.samples:
                aside = f" (disturbed: {why}; too few undisturbed: all kept, each an upper bound)"
            else:
                aside = f", {found.set_aside} more set aside (disturbed: {why})"
        return (
            f"median {fmt_ms(self.median)}, p10 {fmt_ms(self.p10)}, p90 {fmt_ms(self.p90)},"
            f" min {fmt_ms(self.min)}, IQR {fmt_ms(self.iqr)} ({100 * self.spread:.1f} %);"
            f" {self.runs} samples x {self.calls_per_sample} {calls}{aside} after"
            f" {self.warmup_calls} warm-up calls (stopped by {self.stopped_by});"
            f" first call {fmt_ms(self.first_call_ms)} (excluded); {self.device},"
            f" {self.threads} thread{'s' if self.threads != 1 else ''}"
        )


def fmt_ms(value: float) -> str:
    """Milliseconds with a unit and 3 significant digits (µs below 0.1 ms, s from 1 s)."""
    if value < 0.1:
        return f"{value * 1e3:.3g} µs"
    if value >= 1000:
        return f"{value / 1e3:.3g} s"
    return f"{value:.3g} ms"


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Pause this thread's trace and profile functions (coverage, debuggers, Python
    profilers) while timing: under them every Python call costs several times more, and
    timings would not compare with a budget or a baseline taken without them."""
    trace, profile = sys.gettrace(), sys.getprofile()
    if trace is None and profile is None:
        yield
        return
    sys.settrace(None)
    sys.setprofile(None)
    try:
        yield
    finally:
        sys.settrace(trace)
        sys.setprofile(profile)


def _timed(fn: Callable[[], object], timer: Timer, calls: int) -> float:
    timer.start()
    for _ in range(calls):
        fn()
    return timer.stop()


def measure(
    fn: Callable[[], object],
    *,
    timer: Timer,
    device: str,
    threads: int,
    settings: SamplingSettings | None = None,
    clock: Callable[[], float] = time.perf_counter,
    monitor: Monitor | None = None,
) -> LatencyResult:
    """Time ``fn`` (called with no arguments) and return its latency distribution.

    ``timer`` times one block of calls on the device; ``clock`` only bounds how long
    the measurement may take. ``monitor`` (see ``contention.Monitor``) watches for
    interference around every sample. All are injected so tests can fake them.
    """
    settings = settings or SamplingSettings()
    first = _timed(fn, timer, 1)  # traced, if a tracer is on: coverage still sees the code
    with untraced():
        return _sample(fn, timer, device, threads, settings, clock, first, monitor)


def _warm_up(
    fn: Callable[[], object],
    timer: Timer,
    settings: SamplingSettings,
    clock: Callable[[], float],
    first: float,
) -> tuple[int, int]:
    """Warm-up calls made, and calls per sample: until a call agrees with the median of
    the three before it (within 10 %), then enough calls for one sample to last
    ``min_sample_time``."""
    warm: list[float] = []
    warm_start = clock()
    while len(warm) < settings.warmup_max_calls:
        warm.append(_timed(fn, timer, 1))
        if len(warm) >= 3:
            previous = statistics.median(warm[-4:-1])
            if previous > 0 and abs(warm[-1] - previous) <= 0.1 * previous:
                break
        if clock() - warm_start >= settings.warmup_max_time:
            break
    estimate = statistics.median(warm[-3:]) if warm else first
    calls = 1 if estimate <= 0 else max(1, math.ceil(settings.min_sample_time / estimate))
    return len(warm), min(calls, 10_000)


def _sample(
    fn: Callable[[], object],
    timer: Timer,
    device: str,
    threads: int,
    settings: SamplingSettings,
    clock: Callable[[], float],
    first: float,
    monitor: Monitor | None,
) -> LatencyResult:
    warmup_calls, calls = _warm_up(fn, timer, settings, clock, first)
    timed_calls = functools.partial(_timed, fn, timer, calls)
    elapsed: list[float] = []  # seconds per block of calls
    kept: list[float] = []  # per-call seconds of the undisturbed samples, as they come
    kept_s = 0.0  # and their sum, in seconds of sampling
    stopped_by = "max samples"
    if monitor is not None:
        monitor.start()
    sample_start = clock()
    while len(elapsed) < settings.max_samples:
        block = functools.partial(at_depth, len(elapsed) % LAYOUTS, timed_calls)
        elapsed.append(block() if monitor is None else monitor.timed(block))
        if monitor is None or monitor.undisturbed(len(elapsed) - 1, elapsed[-1]):
            kept.append(elapsed[-1] / calls)
            kept_s += elapsed[-1]
        # on a busy machine sampling goes on, up to its own cap, until enough
        # undisturbed samples are in to judge by
        enough = enough_undisturbed(len(kept), len(elapsed), kept_s, settings.min_undisturbed)
        if len(kept) >= settings.min_samples and enough:
            ordered = sorted(kept)
            median = percentile(ordered, 50)
            iqr = percentile(ordered, 75) - percentile(ordered, 25)
            if median > 0 and iqr / median <= settings.target_spread:
                stopped_by = "spread"
                break
        spent = clock() - sample_start
        capped = enough or spent >= settings.busy_max_time
        if spent >= settings.max_time and len(elapsed) >= 3 and capped:
            stopped_by = "time cap"
            break
    sampling = clock() - sample_start
    per_call = [seconds / calls for seconds in elapsed]
    if monitor is None:
        return _result(per_call, [False] * len(elapsed), (), None, first, warmup_calls,
                       calls, device, threads, stopped_by)  # fmt: skip
    judged = monitor.finish(elapsed, sampling, settings.min_undisturbed, MIN_UNDISTURBED_S)
    generous = tuple(seconds / calls * 1e3 for seconds in judged.generous)
    return _result(per_call, judged.aside, generous, judged.interference, first, warmup_calls,
                   calls, device, threads, stopped_by)  # fmt: skip


def _result(
    per_call: list[float],
    aside: list[bool],
    generous_ms: tuple[float, ...],
    interference: Interference | None,
    first: float,
    warmup_calls: int,
    calls: int,
    device: str,
    threads: int,
    stopped_by: str,
) -> LatencyResult:
    clean = [t for t, set_aside in zip(per_call, aside, strict=True) if not set_aside]
    # a busy measurement keeps every sample, each an upper bound
    busy = interference is not None and interference.busy
    samples = per_call if busy or not clean else clean
    return LatencyResult(
        samples_ms=tuple(t * 1e3 for t in samples),
        first_call_ms=first * 1e3,
        warmup_calls=warmup_calls,
        calls_per_sample=calls,
        device=device,
        threads=threads,
        stopped_by=stopped_by,
        set_aside_ms=tuple(t * 1e3 for t, a in zip(per_call, aside, strict=True) if a),
        interference=interference,
        generous_ms=generous_ms,
    )
