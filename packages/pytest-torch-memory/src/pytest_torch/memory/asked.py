"""What a test's markers ask of the memory plugin: its budget, its leak check, and
whether its body may be repeated at all.

Markers are checked at collection (a bad one is a collection error that names the
test); the measuring modules read them again when the test runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_torch.core.markers import definition_of
from pytest_torch.memory.budgets import MemoryBudget, parse_budget
from pytest_torch.memory.leak_parameters import LeakCheck, parse_leak_check
from pytest_torch.memory.markers import BUDGET, LEAK

if TYPE_CHECKING:
    from pytest_torch.memory.settings import MemorySettings


def budget_of(node: pytest.Item | pytest.Metafunc) -> MemoryBudget | None:
    """The test's ``torch_max_memory`` budget, or None; ValueError when malformed."""
    marker = BUDGET.mark_on(node)
    if marker is None:
        return None
    return parse_budget(marker.args, marker.kwargs, definition_of(node).nodeid)


def leak_check_of(
    node: pytest.Item | pytest.Metafunc, settings: MemorySettings
) -> LeakCheck | None:
    """The test's leak check (its marker, else ``--torch-leak-check``'s defaults), or
    None; ValueError when the marker is malformed."""
    marker = LEAK.mark_on(node)
    if marker is None:
        return settings.leak_defaults if settings.leak_all else None
    return parse_leak_check(
        marker.args, marker.kwargs, definition_of(node).nodeid, settings.leak_defaults
    )


def runs_once(config: pytest.Config, nodeid: str, fixturenames: Sequence[str]) -> str | None:
    """Why a sibling plugin needs this test's body to run once (e.g. perf timing it)."""
    answer: str | None = config.hook.pytest_torch_runs_once(
        config=config, nodeid=nodeid, fixturenames=tuple(fixturenames)
    )
    return answer


def check_leak_marker(metafunc: pytest.Metafunc, settings: MemorySettings) -> None:
    """ValueError, naming the test, for a malformed leak marker, or a leak marker on a
    test whose body must run once."""
    leak_check_of(metafunc, settings)
    if LEAK.mark_on(metafunc) is None:
        return
    nodeid = metafunc.definition.nodeid
    why = runs_once(metafunc.config, nodeid, metafunc.fixturenames)
    if why is not None:
        raise ValueError(
            f"{nodeid}: @pytest.mark.{LEAK.name} repeats the test body, but this test"
            f" must run once: {why}. Check the model's step for leaks in a test of its own."
        )
