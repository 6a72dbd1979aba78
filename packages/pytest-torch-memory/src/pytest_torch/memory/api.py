"""The checks as plain functions, for use outside the markers (and outside pytest)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pytest_torch.core import devices
from pytest_torch.core.peaks import PeakMemory, PeakTracker
from pytest_torch.memory.budgets import (
    MemoryBudget,
    MemoryBudgetError,
    budget_failure,
    free_garbage_before,
    over_budget,
    parse_budget,
)
from pytest_torch.memory.leak_parameters import LeakCheck, leak_check_from
from pytest_torch.memory.leaks import MemoryLeakError, check_for_leaks

if TYPE_CHECKING:
    import torch


def _all_devices() -> list[torch.device]:
    return [devices.default_device(t) for t in devices.available_device_types()]


def assert_max_memory(
    fn: Callable[..., Any],
    *args: Any,
    mb: float,
    device: str | Iterable[str] | None = None,
    **kwargs: Any,
) -> dict[str, PeakMemory]:
    """Call ``fn(*args, **kwargs)`` once; raise :class:`MemoryBudgetError` when its peak
    on a device (every available one, or the ``device`` types given) exceeds ``mb`` MiB.
    Returns the measured peaks per device. A budget that is not a finite number > 0
    raises ValueError (TypeError for a bool or a non-number)."""
    __tracebackhide__ = True
    keywords: dict[str, Any] = {"mb": mb}
    if device is not None:
        keywords["device"] = device if isinstance(device, str) else list(device)
    budget: MemoryBudget = parse_budget((), keywords, "assert_max_memory", marker=False)
    chosen = [d for d in _all_devices() if budget.applies_to(d.type)]
    free_garbage_before(budget)
    with PeakTracker(chosen) as tracker:
        fn(*args, **kwargs)
    if any(over_budget(peak, budget) for peak in tracker.results.values()):
        tracker.name_blocks()
    failure = budget_failure(tracker.results, budget, tracker.unmeasured)
    if failure is not None:
        raise MemoryBudgetError(failure)
    return tracker.results


def assert_no_memory_leak(
    fn: Callable[..., Any],
    *args: Any,
    iterations: int = 5,
    tolerance_tensors: int = 0,
    tolerance_bytes: int | str = 0,
    **kwargs: Any,
) -> None:
    """Call ``fn(*args, **kwargs)`` once to warm up and ``iterations`` more times; raise
    :class:`MemoryLeakError` naming what accumulates when every call leaves more live
    tensors (or bytes on a device) behind than the one before. Counts must be whole
    numbers in range (ValueError; TypeError for a bool, a float or a non-number)."""
    __tracebackhide__ = True
    check: LeakCheck = leak_check_from(
        (),
        {
            "iterations": iterations,
            "tolerance_tensors": tolerance_tensors,
            "tolerance_bytes": tolerance_bytes,
        },
        "assert_no_memory_leak",
        LeakCheck(),
        marker=False,
    )
    accelerators = [d for d in _all_devices() if d.type != "cpu"]
    message = check_for_leaks(lambda: fn(*args, **kwargs), check, accelerators)
    if message is not None:
        raise MemoryLeakError(message)
