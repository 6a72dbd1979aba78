"""Which devices a test body's memory is measured on.

The device types core selects for the test (``--torch-device``, narrowed by its
``torch_devices`` marker), narrowed to the test's own device type when it is
parametrized by the ``torch_device`` fixture, and always ``cpu``: host memory matters
for every test, and it is what CPU-only CI measures. Each type becomes a concrete
device through the ``pytest_torch_resolve_device`` hook (``cuda:1`` on an xdist
worker), except the test's own: the device its ``torch_device`` gave it, as perf times
it; a budget's ``device=`` narrows the list further.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_torch.core.chosen_device import chosen_device, resolve_device
from pytest_torch.core.selection import device_types_for

if TYPE_CHECKING:
    import torch

    from pytest_torch.memory.budgets import MemoryBudget


def device_types_to_measure(
    config: pytest.Config, item: pytest.Item, own: torch.device | None
) -> list[str]:
    """``cpu`` first, then the other device types selected for this test (only ``own``'s,
    the device its ``torch_device`` gave it, when it has one)."""
    selected = device_types_for(config, item)
    if own is not None:
        selected = [t for t in selected if t == own.type]
    return ["cpu", *(t for t in selected if t != "cpu")]


def devices_to_measure(item: pytest.Item, budget: MemoryBudget | None) -> list[torch.device]:
    """The concrete devices to measure, only those ``budget`` applies to when given.

    The test's own device is the one it was given (a conftest that overrides
    ``torch_device`` to return ``cuda:1`` is measured on ``cuda:1``), not its type
    resolved again; other types resolve as the fixture would."""
    own = chosen_device(item)  # the test's torch_device, if it uses one
    chosen = []
    for device_type in device_types_to_measure(item.config, item, own):
        if budget is not None and not budget.applies_to(device_type):
            continue
        if own is not None and own.type == device_type:
            chosen.append(own)
        else:
            chosen.append(resolve_device(item.config, device_type))
    return chosen
