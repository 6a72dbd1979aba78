"""One test body measured against its ``torch_max_memory`` budget, or only measured
(``--torch-memory-report``, :func:`peaks_recorded`).

The peak on each measured device (see :mod:`pytest_torch.memory.measured_devices`) is
taken from when the test function is called to when it returns; the figures go into
the test's ``user_properties`` for the peak table and JUnit XML, pass or fail, and the
verdict is a message for the plugin to fail the test with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from pytest_torch.core.peaks import PeakTracker
from pytest_torch.memory.asked import budget_of
from pytest_torch.memory.budgets import (
    MARKER,
    budget_failure,
    free_garbage_before,
    over_budget,
)
from pytest_torch.memory.measured_devices import devices_to_measure
from pytest_torch.memory.report import PeakRecord


class BodyMeasurement:
    """The peaks of one test body; :meth:`start` before the body, :meth:`stop` after."""

    def __init__(self, item: pytest.Item, every_device: bool) -> None:
        """``every_device``: measure every selected device, not only the budgeted ones
        (``--torch-memory-report``)."""
        self.item = item
        self.budget = budget_of(item)
        self.tracker = PeakTracker(devices_to_measure(item, None if every_device else self.budget))

    def start(self) -> None:
        free_garbage_before(self.budget)
        self.tracker.start()

    def stop(self) -> None:
        """End the measurement and record the figures on the test."""
        results = self.tracker.stop()
        self.item.user_properties += PeakRecord.to_properties(results, self.budget)

    def _unmeasured(self) -> dict[str, str]:
        budget = self.budget
        if budget is None:
            return {}
        return {d: r for d, r in self.tracker.unmeasured.items() if budget.applies_to(d)}

    def warnings(self) -> list[str]:
        """One line per budgeted device that could not be measured."""
        return [
            f"{self.item.nodeid}: @pytest.mark.{MARKER} could not measure {device}: {reason};"
            f" the budget was not checked there."
            for device, reason in sorted(self._unmeasured().items())
        ]

    def failure(self) -> str | None:
        """Why the body is over its budget, or None (also without a budget)."""
        budget = self.budget
        if budget is None:
            return None
        if any(over_budget(peak, budget) for peak in self.tracker.results.values()):
            self.tracker.name_blocks()
        return budget_failure(self.tracker.results, budget, self._unmeasured())


@contextlib.contextmanager
def peaks_recorded(item: pytest.Item) -> Iterator[None]:
    """The peaks of a body without a budget, on every selected device, recorded on the
    test (``--torch-memory-report``)."""
    measurement = BodyMeasurement(item, every_device=True)
    measurement.start()
    try:
        yield
    finally:
        measurement.stop()
