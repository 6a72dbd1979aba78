"""``@pytest.mark.torch_max_flops(gflops=...)``: a budget for the floating-point
operations of a test body, counted by torch's ``FlopCounterMode`` on any device
(``engines.flops``). The count is exact, so a test over its budget fails the first
time, whatever the machine's load; a body whose ops have no FLOP formula is named, as
its count would be short."""

from __future__ import annotations

import pytest

from pytest_torch.core import reach
from pytest_torch.core.checks import Check
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.markers import MarkerSpec, definition_of
from pytest_torch.perf.engines.flops.counting import FlopCounting
from pytest_torch.perf.engines.flops.engine import budget_record
from pytest_torch.perf.engines.flops.judging import over_budget, short_count
from pytest_torch.perf.engines.wall.budget import finite_number
from pytest_torch.perf.records import PREFIX

FLOP_BUDGET = MarkerSpec(
    "torch_max_flops",
    "fail the test if its body performs more than gflops billion floating-point operations"
    " (counted by torch's FlopCounterMode: exact, on any device).",
    positional=("gflops",),
    example="@pytest.mark.torch_max_flops(gflops=2.5)",
)


def budget(node: pytest.Item | pytest.Metafunc) -> float:
    """The test's budget in GFLOPs; ValueError naming the test for a malformed marker."""
    marker = FLOP_BUDGET.mark_on(node)
    assert marker is not None  # only asked of marked tests
    prefix = f"{definition_of(node).nodeid}: @pytest.mark.{FLOP_BUDGET.name}"
    gflops = FLOP_BUDGET.bind(marker.args, marker.kwargs, prefix)["gflops"]
    if gflops is None:
        raise ValueError(
            f"{prefix} needs a budget: gflops=, the billions of floating-point operations"
            f" the test body may perform. Example: {FLOP_BUDGET.example}"
        )
    if not finite_number(gflops) or not gflops > 0:
        raise ValueError(
            f"{prefix} needs a positive, finite budget in billions of floating-point"
            f" operations, got {gflops!r}. Example: {FLOP_BUDGET.example}"
        )
    return float(gflops)


class FlopBudget(Check):
    marker = FLOP_BUDGET

    def validate(self, node: pytest.Item | pytest.Metafunc) -> None:
        budget(node)

    def start(self, item: pytest.Item) -> FlopCounting:
        counting = FlopCounting()
        counting.__enter__()
        return counting

    def finish(
        self, item: pytest.Item, state: FlopCounting, raised: BaseException | None
    ) -> str | None:
        """Stop counting; publish the figures (also for a body that failed, whose own
        failure stands); the failure when the body went over its budget."""
        state.__exit__(None, None, None)
        gflops, counted = budget(item), state.result
        failure = None if raised is not None else over_budget(plain_nodeid(item), counted, gflops)
        if raised is not None:
            verdict = "test failed" if not isinstance(raised, pytest.skip.Exception) else "skipped"
        elif failure is not None:
            verdict = "OVER BUDGET"
        else:
            verdict = "within budget"
        if counted.uncounted and raised is None:
            verdict += f" ({len(counted.uncounted)} op(s) not counted)"
            reach.not_acted(item, self.label, short_count(counted.uncounted))
        row = budget_record(_label(item), counted, gflops, verdict)
        item.user_properties.extend(row.to_properties())
        return failure


def _label(item: pytest.Item) -> str:
    """The budget row's name: the test id, or ``<test id>::flop-budget`` where the body
    already made a row of that name (a ``perf_baseline`` or ``latency`` call): two rows,
    never one that mixes both, and JUnit property names that stay unique."""
    nodeid = plain_nodeid(item)
    if any(str(name).startswith(f"{PREFIX}{nodeid}.") for name, _ in item.user_properties):
        return f"{nodeid}::flop-budget"
    return nodeid
