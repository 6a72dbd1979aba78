"""Measuring one call on the wall clock: its latency, watched for interference, and what
it adds to memory at its peak."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_torch.core import devices
from pytest_torch.core.peaks import PeakTracker
from pytest_torch.perf.calls import bind, infer_device, run_context, torch_threads
from pytest_torch.perf.engines.wall import contention
from pytest_torch.perf.engines.wall.machine_probes import off_cpu_waits, wait_probe
from pytest_torch.perf.engines.wall.timing import LatencyResult, SamplingSettings, measure

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.settings import PerfSettings


def measure_latency(
    target: Any,
    *inputs: Any,
    settings: SamplingSettings | None = None,
    device: torch.device | str | None = None,
    threads: int | None = None,
    **kwargs: Any,
) -> LatencyResult:
    """Measure ``target(*inputs, **kwargs)`` on ``device`` (None: inferred from the
    inputs, :func:`infer_device`; the fixtures pass :func:`work_device`'s answer); see
    :func:`timing.measure`.

    ``threads`` sets torch's intra-op thread count for the measurement (restored after;
    None keeps the count in force). Samples during which this process waited for a CPU,
    or its core ran slow enough to slow the code, are set aside, and the result says how
    busy the machine was and how fast the code can at most have run.
    """
    dev = devices.as_device(device) if device is not None else infer_device(target, inputs, kwargs)
    run = bind(target, inputs, kwargs)
    with torch_threads(threads) as count, run_context(target):
        monitor = contention.Monitor(
            wait_probe(dev.type, count),
            device_type=dev.type,
            off_cpu_waits=off_cpu_waits(dev.type, count),
            workers=count > 1,
        )
        try:
            return measure(
                run,
                timer=devices.Stopwatch(dev),
                device=str(dev),
                threads=count,
                settings=settings,
                monitor=monitor,
            )
        finally:
            monitor.close()


def peak_memory(
    target: Any,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
    threads: int | None = None,
    device: torch.device | str | None = None,
) -> dict[str, int]:
    """Bytes one call adds at its peak on its device (CPU included), on top of what was
    allocated when it started, where the core layer can measure it; ``threads`` as in
    :func:`measure_latency`, ``device`` the one to measure (None: inferred from the
    inputs, :func:`infer_device`).

    Not the absolute peak: that includes whatever earlier tests left alive, so it would
    change with test order and with how xdist shares the tests out."""
    dev = devices.as_device(device) if device is not None else infer_device(target, inputs, kwargs)
    run = bind(target, inputs, kwargs)
    with torch_threads(threads), PeakTracker([dev]) as tracker, run_context(target):
        run()
    return {name: peak.added for name, peak in tracker.results.items()}


def sampling(settings: PerfSettings) -> SamplingSettings:
    """How hard a measurement tries, from the session's options."""
    return SamplingSettings(
        max_time=settings.max_time,
        busy_max_time=max(settings.busy_max_time, settings.max_time),
        min_undisturbed=settings.min_undisturbed,
    )
