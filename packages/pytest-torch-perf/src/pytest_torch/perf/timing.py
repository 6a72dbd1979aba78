"""Measuring how long a model or a callable takes, so that noise does not decide.

The first call (which may compile, allocate or autotune) is timed and reported apart.
Then warm-up runs until consecutive timings agree, then samples are taken until their
spread is tight or a time cap is hit. Calls too short to time one by one are grouped
into blocks. The device is synchronized (or timed with device events) through the
core device layer, under whatever thread count is in force.

``torch.utils.benchmark.Timer`` is the closest tool; it times code strings under a
thread count it sets itself (one by default), does not report the first call, and
synchronizes only CUDA. The benchmarks compare the two side by side.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

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

    def __post_init__(self) -> None:
        if not self.max_time > 0:
            raise ValueError(f"max_time must be positive, got {self.max_time}")
        if not 0 < self.target_spread < 1:
            raise ValueError(f"target_spread must be in (0, 1), got {self.target_spread}")


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation percentile (as numpy's default) of sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    position = (len(sorted_values) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


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
    _sorted: list[float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.samples_ms:
            raise ValueError("a LatencyResult needs at least one sample")
        object.__setattr__(self, "_sorted", sorted(self.samples_ms))

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
        return (
            f"median {fmt_ms(self.median)}, p10 {fmt_ms(self.p10)}, p90 {fmt_ms(self.p90)},"
            f" min {fmt_ms(self.min)}, IQR {fmt_ms(self.iqr)} ({100 * self.spread:.1f} %);"
            f" {self.runs} samples x {self.calls_per_sample} {calls} after"
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
) -> LatencyResult:
    """Time ``fn`` (called with no arguments) and return its latency distribution.

    ``timer`` times one block of calls on the device; ``clock`` only bounds how long
    the measurement may take. Both are injected so tests can fake time.
    """
    settings = settings or SamplingSettings()
    first = _timed(fn, timer, 1)  # traced, if a tracer is on: coverage still sees the code
    with untraced():
        return _sample(fn, timer, device, threads, settings, clock, first)


def _sample(
    fn: Callable[[], object],
    timer: Timer,
    device: str,
    threads: int,
    settings: SamplingSettings,
    clock: Callable[[], float],
    first: float,
) -> LatencyResult:

    # Warm-up: until a call agrees with the median of the three before it (within 10 %).
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
    calls = min(calls, 10_000)

    samples: list[float] = []
    stopped_by = "max samples"
    sample_start = clock()
    while len(samples) < settings.max_samples:
        samples.append(_timed(fn, timer, calls) / calls)
        if len(samples) >= settings.min_samples:
            ordered = sorted(samples)
            median = percentile(ordered, 50)
            iqr = percentile(ordered, 75) - percentile(ordered, 25)
            if median > 0 and iqr / median <= settings.target_spread:
                stopped_by = "spread"
                break
        if clock() - sample_start >= settings.max_time and len(samples) >= 3:
            stopped_by = "time cap"
            break
    return LatencyResult(
        samples_ms=tuple(s * 1e3 for s in samples),
        first_call_ms=first * 1e3,
        warmup_calls=len(warm),
        calls_per_sample=calls,
        device=device,
        threads=threads,
        stopped_by=stopped_by,
    )
