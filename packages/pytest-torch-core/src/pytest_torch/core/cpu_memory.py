"""Allocation events of torch's CPU allocator, for peak memory on the CPU device.

torch keeps no running peak for CPU memory, but its CPU allocator reports every
allocation and free to the profiler when memory profiling
is on. :class:`CpuAllocationRecorder` turns that on with no operator recording (only the
user scope, which nothing uses by default), so the cost is one event per allocation.

Two bits of console noise are kept out of the user's output: the profiler announces
every start and stop on stderr, and the allocator warns (once per 1000 times) when a
block allocated before profiling started is freed. The first is silenced around the
start/stop calls; the second is spent once, silenced, when the first recorder starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

_T = TypeVar("_T")

#: the allocator warns on the 1st, 1001st, ... free of a block it never saw allocated
_WARNING_PERIOD = 1000
_warning_spent = False


class CpuAllocation(NamedTuple):
    """One allocation (size > 0) or free (size < 0) by torch's CPU allocator."""

    time_ns: int
    size: int
    ptr: int


def _silenced(call: Callable[[], _T]) -> _T:
    """Run ``call`` with file descriptor 2 pointed at /dev/null (C++ logging goes there)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or odd stream: nothing to flush
            stream.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to silence
        return call()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        return call()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _profiler() -> tuple[Any, Any]:
    from torch._C import _autograd, _profiler

    return _autograd, _profiler


def profiler_running() -> bool:
    """Whether torch's profiler is already on (then CPU allocations cannot be recorded)."""
    autograd, _ = _profiler()
    return bool(autograd._profiler_enabled())


def _spend_allocator_warning() -> None:
    """Trigger the allocator's "unknown block" warning where nobody sees it, so the test
    bodies we record do not print it (it repeats only every 1000 such frees)."""
    global _warning_spent
    if _warning_spent:
        return
    _warning_spent = True
    import torch

    blocks = [torch.empty(1) for _ in range(_WARNING_PERIOD + 1)]

    def free_unknown_blocks() -> None:
        _start()
        blocks.clear()
        _stop()

    _silenced(free_unknown_blocks)


def _start() -> None:
    autograd, profiler = _profiler()
    config = profiler.ProfilerConfig(
        profiler.ProfilerState.KINETO,
        False,  # shapes
        True,  # memory
        False,  # stack
        False,  # flops
        False,  # modules
        profiler._ExperimentalConfig(),
    )
    activities = {profiler.ProfilerActivity.CPU}
    autograd._prepare_profiler(config, activities)
    autograd._enable_profiler(config, activities, {profiler.RecordScope.USER_SCOPE})


def _stop() -> Any:
    autograd, _ = _profiler()
    return autograd._disable_profiler()


def _walk(events: list[Any]) -> Iterator[Any]:
    for event in events:
        yield event
        yield from _walk(event.children)


class CpuAllocationRecorder:
    """Records torch's CPU allocations between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self.running = False

    def start(self) -> bool:
        """Start recording; False when torch's profiler is already in use."""
        if self.running:
            raise RuntimeError("this recorder is already running")
        if profiler_running():
            return False
        _spend_allocator_warning()
        _silenced(_start)
        self.running = True
        return True

    def stop(self) -> list[CpuAllocation]:
        """Stop recording; the allocations and frees in the order they happened."""
        if not self.running:
            return []
        self.running = False
        result = _silenced(_stop)
        _, profiler = _profiler()
        allocation = profiler._EventType.Allocation
        recorded = []
        for event in _walk(result.experimental_event_tree()):
            kind, fields = event.typed
            if kind != allocation or fields.device.type != "cpu" or fields.alloc_size == 0:
                continue
            recorded.append(
                CpuAllocation(
                    int(event.start_time_ns),
                    int(fields.alloc_size),
                    int(fields.ptr),
                )
            )
        recorded.sort(key=lambda a: a.time_ns)  # stable: same-time events keep their order
        return recorded
