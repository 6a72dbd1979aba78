"""Unit tests of the measurement engine, with faked time."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_torch.perf.engines.wall.timing import (
    LatencyResult,
    SamplingSettings,
    fmt_ms,
    measure,
    percentile,
)


class FakeTime:
    """A timer and a clock driven by scripted call durations (seconds per call)."""

    def __init__(self, durations):
        self.durations = iter(durations)
        self.now = 0.0
        self.calls = 0
        self._pending = 0.0

    def fn(self):
        self.calls += 1
        self._pending += next(self.durations)

    def start(self):
        self._pending = 0.0

    def stop(self):
        self.now += self._pending
        return self._pending

    def clock(self):
        return self.now


def steady(first, warm, value, n=100_000):
    return [first, *warm] + [value] * n


def run(durations, **settings):
    fake = FakeTime(durations)
    result = measure(
        fake.fn,
        timer=fake,
        clock=fake.clock,
        device="cpu",
        threads=2,
        settings=SamplingSettings(**settings),
    )
    return result, fake


def test_first_call_is_reported_apart_and_excluded():
    result, _ = run(steady(0.5, [0.01, 0.01, 0.01], 0.01))
    assert result.first_call_ms == pytest.approx(500)
    assert result.median == pytest.approx(10)
    assert max(result.samples_ms) == pytest.approx(10)


def test_warm_up_runs_until_timings_agree():
    warm = [0.05, 0.04, 0.03, 0.02, 0.011, 0.01, 0.01, 0.01]
    result, _ = run(steady(0.1, warm, 0.01))
    assert result.warmup_calls == 7  # stops when a call is within 10 % of the 3 before
    assert result.median == pytest.approx(10)


def test_warm_up_is_capped():
    result, _ = run([0.1] + [0.01 * (i % 2 + 1) for i in range(10_000)], warmup_max_calls=5)
    assert result.warmup_calls == 5


def test_stops_once_the_spread_is_tight():
    result, _ = run(steady(0.01, [0.01] * 3, 0.01), min_samples=7)
    assert result.stopped_by == "spread"
    assert result.runs == 7
    assert result.spread == 0


def test_noisy_measurements_stop_at_the_time_cap():
    noisy = [0.01, 0.01, 0.01, 0.01] + [0.005 if i % 2 else 0.02 for i in range(100_000)]
    result, fake = run(noisy, max_time=0.5)
    assert result.stopped_by == "time cap"
    assert 0.5 <= fake.now <= 0.5 + 0.2  # one sample past the cap at most, plus warm-up
    assert result.spread > 0.05


def test_tiny_calls_are_grouped_into_blocks():
    result, fake = run(steady(1e-5, [1e-5] * 3, 1e-5), min_sample_time=1e-3)
    assert result.calls_per_sample == 100
    assert result.median == pytest.approx(0.01)
    assert fake.calls == 1 + 3 + result.runs * 100


def test_statistics_match_numpy():
    samples = tuple(float(x) for x in np.random.default_rng(0).gamma(2.0, 1.0, 101))
    result = LatencyResult(samples, 1.0, 3, 1, "cpu", 1, "spread")
    for name, q in (("median", 50), ("p90", 90), ("p99", 99), ("p10", 10)):
        assert result.stat(name) == pytest.approx(np.percentile(samples, q))
    assert result.mean == pytest.approx(np.mean(samples))
    assert result.min == min(samples)
    q75, q25 = np.percentile(samples, [75, 25])
    assert result.iqr == pytest.approx(q75 - q25)
    assert percentile([3.0], 90) == 3.0


def test_unknown_statistic_is_rejected():
    result = LatencyResult((1.0,), 1.0, 0, 1, "cpu", 1, "spread")
    with pytest.raises(ValueError, match="unknown statistic 'p95'"):
        result.stat("p95")


def test_describe_says_how_it_was_measured():
    result = LatencyResult((1.0, 1.1, 1.2), 30.0, 4, 2, "cuda:0", 8, "time cap")
    text = result.describe()
    for part in (
        "median 1.1 ms",
        "3 samples x 2 calls",
        "4 warm-up calls",
        "time cap",
        "first call 30 ms (excluded)",
        "cuda:0",
        "8 threads",
    ):
        assert part in text
    assert fmt_ms(0.05) == "50 µs"
    assert fmt_ms(12.345) == "12.3 ms"
    assert fmt_ms(2500) == "2.5 s"


def test_settings_are_validated():
    with pytest.raises(ValueError, match="max_time"):
        SamplingSettings(max_time=0)
    with pytest.raises(ValueError, match="target_spread"):
        SamplingSettings(target_spread=1.5)


def test_real_measurement_of_a_module_runs_in_inference_mode():
    import torch

    from pytest_torch.perf import measure_latency

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(torch.is_inference_mode_enabled())
            return x * 2

    result = measure_latency(Probe(), torch.ones(4), settings=SamplingSettings(max_time=0.05))
    assert all(seen)
    assert result.device == "cpu"
    assert result.threads == torch.get_num_threads()

    def step(x):
        seen.append(torch.is_inference_mode_enabled())
        return x + 1

    seen.clear()
    measure_latency(step, torch.ones(4), settings=SamplingSettings(max_time=0.05))
    assert not any(seen)  # callables run as given


@pytest.mark.accelerator
def test_accelerator_latency_includes_the_device_work(accelerator):
    """CUDA is timed with events; an accelerator without them is synchronized around the
    host clock. Either way the figure includes the kernel's time."""
    import torch

    from pytest_torch.core.devices import Stopwatch
    from pytest_torch.perf import measure_latency

    size = 2048 if accelerator == "cuda" else 256
    a = torch.full((size, size), 0.5, device=accelerator)  # no RNG: the guard stays quiet
    assert Stopwatch(a.device).uses_events == (accelerator in ("cuda", "xpu"))
    result = measure_latency(torch.matmul, a, a, settings=SamplingSettings(max_time=0.2))
    assert result.device.startswith(accelerator)
    # medians are in ms: a 2048^3 matmul (17 GFLOP) takes over 0.25 ms on current GPUs,
    # a 256^3 one (34 MFLOP) over 0.01 ms on any CPU, so the timings include the kernel
    assert result.median > (0.05 if accelerator == "cuda" else 0.01)
    assert result.first_call_ms > 0


def test_sampling_runs_without_the_trace_function_and_restores_it():
    """Under coverage or a debugger only the first call is traced; the samples are not."""
    import sys

    fake = FakeTime(steady(0.01, [0.001] * 3, 0.001))
    traced = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "fn":
            traced.append(1)

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        result = measure(fake.fn, timer=fake, clock=fake.clock, device="cpu", threads=2)
        still_tracing = sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    assert still_tracing
    assert fake.calls > 10 and result.runs >= 5
    assert traced == [1]  # the first call only
