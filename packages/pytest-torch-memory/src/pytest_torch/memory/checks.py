"""The memory plugin's per-test checks, registered with core's check registry
(:mod:`pytest_torch.core.checks`): the ``torch_max_memory`` budget, a test body's peak
on each measured device against its budget (:mod:`.body_measurement`).

The leak check is not among them: it is asked for by an option as well as by its marker
(``--torch-leak-check`` checks every test, which the registry, driven by markers, cannot
express), and it replaces the test's body instead of running around it; it lives in
:mod:`.leak_runner`.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.checks import Check, Checks
from pytest_torch.memory.asked import budget_of
from pytest_torch.memory.markers import BUDGET
from pytest_torch.memory.settings import settings_key

if TYPE_CHECKING:
    from pytest_torch.memory.body_measurement import BodyMeasurement


class PeakBudget(Check):
    """``@pytest.mark.torch_max_memory``: the body's peak on each measured device (every
    selected one with ``--torch-memory-report``) within the budget."""

    marker = BUDGET

    def validate(self, node: pytest.Item | pytest.Metafunc) -> None:
        budget_of(node)

    def start(self, item: pytest.Item) -> BodyMeasurement:
        # start-up: the measuring modules (~5 ms) load only in runs that measure
        from pytest_torch.memory.body_measurement import BodyMeasurement

        every_device = item.config.stash[settings_key].report_all
        measurement = BodyMeasurement(item, every_device=every_device)
        measurement.start()
        return measurement

    def finish(self, item: pytest.Item, state: Any, raised: BaseException | None) -> str | None:
        measurement: BodyMeasurement = state
        measurement.stop()
        if raised is not None:
            return None
        for message in measurement.warnings():
            warnings.warn(pytest.PytestWarning(message), stacklevel=1)
        return measurement.failure()


#: the memory checks, for the plugin's hooks to iterate
CHECKS = Checks("torch_memory_checks", (PeakBudget(),))
