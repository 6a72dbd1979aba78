"""Running a test under ``@pytest.mark.torch_compile_budget``: the marker checked at
collection, the test body watched (``watch``), the budget judged
(``checks``) and the figures published for the end-of-run table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_torch.core.markers import definition_of
from pytest_torch.perf.markers import COMPILE_BUDGET

if TYPE_CHECKING:
    from pytest_torch.perf.compilation.checks import CompileBudget
    from pytest_torch.perf.compilation.watch import CompileWatch

MARKER = COMPILE_BUDGET.name
#: the budget of the test being watched, read once when its watch starts
budget_key = pytest.StashKey["CompileBudget"]()


def budget(node: pytest.Item | pytest.Metafunc) -> CompileBudget | None:
    """The test's budget, None without the marker; ValueError for a malformed one."""
    from pytest_torch.perf.compilation.checks import parse_budget

    marker = COMPILE_BUDGET.mark_on(node)
    if marker is None:
        return None
    prefix = f"{definition_of(node).nodeid}: @pytest.mark.{MARKER}"
    values = COMPILE_BUDGET.bind(marker.args, marker.kwargs, prefix)
    return parse_budget(values, prefix, COMPILE_BUDGET.example)


def check_marked(metafunc: pytest.Metafunc) -> None:
    """At collection: a collection error naming the test for a malformed marker."""
    try:
        budget(metafunc)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None


def start(item: pytest.Item) -> CompileWatch | None:
    """The watch over the test body, already running; None for a test without the
    marker."""
    if COMPILE_BUDGET.mark_on(item) is None:
        return None
    try:
        test_budget = budget(item)  # checked at collection, except for unittest methods
        problem = None
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    from pytest_torch.perf.compilation.watch import CompileWatch, warm_up

    # the process's first compile pays a one-time start; a time budget is judged as if
    # the test ran second, whatever ran before it (inductor only where time is judged)
    assert test_budget is not None
    item.stash[budget_key] = test_budget
    warm_up(("eager", "inductor") if test_budget.seconds is not None else ("eager",))

    watch = CompileWatch()
    watch.__enter__()
    return watch


def finish(
    item: pytest.Item, watch: CompileWatch | None, raised: BaseException | None = None
) -> str | None:
    """Stop watching, publish the figures, and return the failure message when the body
    passed but went over its budget; a body that raised (failed, or skipped itself)
    keeps its own outcome. Nothing to do for a test without a watch."""
    if watch is None:
        return None
    from pytest_torch.perf.compilation.checks import CompileRecord, judge

    watch.__exit__(None, None, None)
    test_budget = item.stash[budget_key]
    failure = None
    if isinstance(raised, pytest.skip.Exception):
        verdict = "skipped"
    elif raised is not None:
        verdict = "test failed"
    else:
        failure = judge(item.nodeid, watch.report, test_budget, MARKER)
        if failure is None:
            verdict = "ok"
        elif watch.report.compiles == 0:
            verdict = "compiled nothing"
        else:
            verdict = "over budget"
    record = CompileRecord.of(item.nodeid, watch.report, test_budget, verdict)
    item.user_properties.extend(record.to_properties())
    return failure
