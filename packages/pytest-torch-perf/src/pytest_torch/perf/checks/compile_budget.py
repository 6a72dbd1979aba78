"""``@pytest.mark.torch_compile_budget``: the marker checked at collection, the test body
watched (``compilation.watch``), the budget judged (``compilation.checks``) and the
figures published for the end-of-run table."""

from __future__ import annotations

import pytest

from pytest_torch.core.checks import Check
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.markers import MarkerSpec, definition_of
from pytest_torch.perf.compilation.checks import CompileBudget as Budget
from pytest_torch.perf.compilation.checks import CompileRecord, judge, parse_budget
from pytest_torch.perf.compilation.watch import CompileWatch, warm_up

COMPILE_BUDGET = MarkerSpec(
    "torch_compile_budget",
    "fail the test if torch.compile, during the test body, recompiles or breaks its graph"
    " more often than allowed, or compiles for longer than seconds (counted from an"
    " empty compile cache).",
    positional=("recompiles", "graph_breaks", "seconds"),
    defaults={"recompiles": 0, "graph_breaks": 0, "seconds": None},
    example="@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0, seconds=60)",
)
MARKER = COMPILE_BUDGET.name


def budget(node: pytest.Item | pytest.Metafunc) -> Budget | None:
    """The test's budget, None without the marker; ValueError for a malformed one."""
    marker = COMPILE_BUDGET.mark_on(node)
    if marker is None:
        return None
    prefix = f"{definition_of(node).nodeid}: @pytest.mark.{MARKER}"
    values = COMPILE_BUDGET.bind(marker.args, marker.kwargs, prefix)
    return parse_budget(values, prefix, COMPILE_BUDGET.example)


class CompileBudget(Check):
    marker = COMPILE_BUDGET

    def validate(self, node: pytest.Item | pytest.Metafunc) -> None:
        budget(node)

    def start(self, item: pytest.Item) -> tuple[CompileWatch, Budget]:
        """The watch over the test body, already running."""
        test_budget = budget(item)
        assert test_budget is not None  # only started for a marked test
        # the process's first compile pays a one-time start; a time budget is judged as if
        # the test ran second, whatever ran before it (inductor only where time is judged)
        warm_up(("eager", "inductor") if test_budget.seconds is not None else ("eager",))
        watch = CompileWatch()
        watch.__enter__()
        return watch, test_budget

    def finish(
        self, item: pytest.Item, state: tuple[CompileWatch, Budget], raised: BaseException | None
    ) -> str | None:
        """Stop watching, publish the figures, and return the failure message when the
        body passed but went over its budget; a body that raised (failed, or skipped
        itself) keeps its own outcome."""
        watch, test_budget = state
        watch.__exit__(None, None, None)
        failure = None
        if isinstance(raised, pytest.skip.Exception):
            verdict = "skipped"
        elif raised is not None:
            verdict = "test failed"
        else:
            failure = judge(plain_nodeid(item), watch.report, test_budget, MARKER)
            if failure is None:
                verdict = "ok"
            elif watch.report.compiles == 0:
                verdict = "compiled nothing"
            else:
                verdict = "over budget"
        record = CompileRecord.of(plain_nodeid(item), watch.report, test_budget, verdict)
        item.user_properties.extend(record.to_properties())
        return failure
