"""``@pytest.mark.torch_max_latency``: a budget for the ``latency(...)`` calls of a test.
The marker is checked at collection (the test must use the ``latency`` fixture), each
call is judged by ``fixtures.latency_measurer`` (``engines.wall.budget``), and a marked
test that never called ``latency(...)`` fails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pytest_torch.core.checks import Check
from pytest_torch.core.markers import MarkerSpec, definition_of
from pytest_torch.perf.engines.wall.budget import Budget, finite_number
from pytest_torch.perf.engines.wall.timing import STATISTICS

LATENCY = MarkerSpec(
    "torch_max_latency",
    "fail the test if a latency(...) call in it takes longer than ms milliseconds (stat:"
    " median, mean, min, p90, p99).",
    positional=("ms", "stat"),
    defaults={"stat": "median"},
    example="@pytest.mark.torch_max_latency(ms=50) or (50, stat='p90')",
)


def parse_budget(args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> Budget:
    """Budget from ``torch_max_latency`` marker arguments; ValueError naming ``where``."""
    example = f"Example: {LATENCY.example}"
    bound = LATENCY.bind(args, kwargs, f"{where}: @pytest.mark.{LATENCY.name}")
    ms, stat = bound["ms"], bound["stat"]
    if not finite_number(ms) or not ms > 0:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency needs a positive, finite budget in"
            f" milliseconds, got {ms!r}. {example}"
        )
    if stat not in STATISTICS:
        raise ValueError(
            f"{where}: @pytest.mark.torch_max_latency stat must be one of"
            f" {', '.join(STATISTICS)}, got {stat!r}. {example}"
        )
    return Budget(float(ms), str(stat))


#: how many times a test called latency(...) (a marked test must call it)
calls_key = pytest.StashKey[int]()


def count_call(item: pytest.Item) -> None:
    """A ``latency(...)`` call in the test."""
    item.stash[calls_key] = item.stash.get(calls_key, 0) + 1


class LatencyBudget(Check):
    marker = LATENCY
    fixture = "latency"
    fixture_use = "add a `latency` argument and time the code with latency(model, *inputs)"
    unittest = (
        "a unittest.TestCase method cannot request the latency fixture that times code"
        " under the budget; time the step in a plain test function: def test_x(latency):"
        " latency(model, inputs)"
    )

    def budget(self, node: pytest.Item | pytest.Metafunc) -> Budget | None:
        """The test's budget; ValueError for a malformed marker."""
        marker = LATENCY.mark_on(node)
        if marker is None:
            return None
        return parse_budget(marker.args, marker.kwargs, definition_of(node).nodeid)

    def validate(self, node: pytest.Item | pytest.Metafunc) -> None:
        self.budget(node)

    def finish(self, item: pytest.Item, state: object, raised: BaseException | None) -> str | None:
        if item.stash.get(calls_key, 0) == 0:
            return (
                f"{item.nodeid} is marked @pytest.mark.{LATENCY.name} but never called"
                f" latency(...), so nothing was checked against the budget. Time the code"
                f" under budget with latency(model, *inputs), or remove the marker."
            )
        return None


LATENCY_BUDGET = LatencyBudget()
