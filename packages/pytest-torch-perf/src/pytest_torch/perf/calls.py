"""Turning ``model_or_callable, *inputs, **kwargs`` into something to time."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytest_torch.core import devices
from pytest_torch.perf.timing import LatencyResult, SamplingSettings, measure

if TYPE_CHECKING:
    import torch


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def infer_device(target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    """The device the work runs on: the inputs', else the module's parameters', else cpu."""
    import torch

    for tensor in _tensors((inputs, kwargs)):
        return tensor.device
    if isinstance(target, torch.nn.Module):
        for tensor in target.parameters():
            return tensor.device
        for tensor in target.buffers():
            return tensor.device
    return torch.device("cpu")


def bind(target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], object]:
    """A no-argument callable that runs the target once."""
    if not callable(target):
        raise TypeError(
            f"expected a torch.nn.Module or a callable to time, got {type(target).__name__}"
        )

    def run() -> object:
        return target(*inputs, **kwargs)

    return run


def run_context(target: Any) -> contextlib.AbstractContextManager[Any]:
    """Modules run in inference mode; callables run as given (a training step works)."""
    import torch

    if isinstance(target, torch.nn.Module):
        return torch.inference_mode()
    return contextlib.nullcontext()


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads (None: the count in force), restored after;
    yields the count in force."""
    import torch

    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield before
        return
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def measure_latency(
    target: Any,
    *inputs: Any,
    settings: SamplingSettings | None = None,
    device: torch.device | str | None = None,
    threads: int | None = None,
    **kwargs: Any,
) -> LatencyResult:
    """Measure ``target(*inputs, **kwargs)`` on its device; see :func:`timing.measure`.

    ``threads`` sets torch's intra-op thread count for the measurement (restored after;
    None keeps the count in force). Samples during which this process waited for a CPU,
    or its core ran slow, are set aside, and the result says how busy the machine was.
    """
    from pytest_torch.perf.contention import Monitor, wait_probe

    dev = devices.as_device(device) if device is not None else infer_device(target, inputs, kwargs)
    run = bind(target, inputs, kwargs)
    with torch_threads(threads) as count, run_context(target):
        monitor = Monitor(wait_probe(dev.type, count))
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
    target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any], threads: int | None = None
) -> dict[str, int]:
    """Bytes one call adds at its peak on its device (CPU included), on top of what was
    allocated when it started, where the core layer can measure it; ``threads`` as in
    :func:`measure_latency`.

    Not the absolute peak: that includes whatever earlier tests left alive, so it would
    change with test order and with how xdist shares the tests out."""
    from pytest_torch.core.memory import PeakTracker

    dev = infer_device(target, inputs, kwargs)
    run = bind(target, inputs, kwargs)
    with torch_threads(threads), PeakTracker([dev]) as tracker, run_context(target):
        run()
    return {name: peak.added for name, peak in tracker.results.items()}
