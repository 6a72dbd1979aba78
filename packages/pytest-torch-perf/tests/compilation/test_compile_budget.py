"""@pytest.mark.torch_compile_budget's budget: its arguments, the judging against it and
its record."""

from __future__ import annotations

import pytest

from pytest_torch.perf.compilation.checks import (
    CompileBudget,
    CompileRecord,
    judge,
    parse_budget,
    render_table,
)
from pytest_torch.perf.compilation.watch import CompileReport, Recompile

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


# -- the budget ------------------------------------------------------------------------------

EXAMPLE = "@pytest.mark.torch_compile_budget(recompiles=0)"


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"recompiles": -1}, "recompiles= must be a whole number >= 0"),
        ({"recompiles": 1.5}, "recompiles= must be a whole number >= 0"),
        ({"graph_breaks": True}, "graph_breaks= must be a whole number >= 0"),
        ({"graph_breaks": "2"}, "graph_breaks= must be a whole number >= 0"),
        ({"seconds": 0}, "seconds= must be a number of seconds > 0"),
        ({"seconds": -3.0}, "seconds= must be a number of seconds > 0"),
        ({"seconds": "10"}, "seconds= must be a number of seconds > 0"),
        ({"seconds": float("nan")}, "seconds= must be a number of seconds > 0"),
    ],
)
def test_bad_budgets_name_the_test_and_the_argument(values, error):
    full = {"recompiles": 0, "graph_breaks": 0, "seconds": None, **values}
    with pytest.raises(ValueError) as caught:
        parse_budget(full, "t.py::test_x: @pytest.mark.torch_compile_budget", EXAMPLE)
    assert str(caught.value).startswith(f"t.py::test_x: @pytest.mark.torch_compile_budget: {error}")
    assert str(caught.value).endswith(f"Example: {EXAMPLE}")


def test_a_good_budget():
    values = {"recompiles": 2, "graph_breaks": 0, "seconds": 30}
    assert parse_budget(values, "p", EXAMPLE) == CompileBudget(2, 0, 30.0)


def _report(compiles: int = 1, recompiles: int = 0, seconds: float = 0.5) -> CompileReport:
    return CompileReport(
        compiles=compiles,
        recompiles=[
            Recompile("0/1", "forward (m.py:3)", ["tensor 'x' size mismatch at index 0."], None)
        ]
        * recompiles,
        seconds=seconds,
    )


def test_judging_against_the_budget():
    budget = CompileBudget(recompiles=1, graph_breaks=0, seconds=2.0)
    assert judge("t::x", _report(compiles=2, recompiles=1, seconds=1.9), budget, "m") is None
    over = judge("t::x", _report(compiles=3, recompiles=2, seconds=3.0), budget, "m")
    assert over is not None
    assert over.startswith("t::x: over its torch.compile budget (recompiles <= 1, graph breaks")
    assert "recompiles: 2, allowed 1" in over
    assert "forward (m.py:3) recompiled" in over and "fix: dimension 0 of 'x'" in over
    assert "compile time: 3 s, allowed 2 s (1.5x; 3 compiles)" in over
    nothing = judge("t::x", _report(compiles=0), budget, "torch_compile_budget")
    assert nothing is not None and "torch.compile compiled nothing in it" in nothing


def test_the_record_survives_the_trip_through_junit_and_xdist():
    record = CompileRecord.of("t.py::test_x", _report(2, 1, 0.25), CompileBudget(), "over budget")
    as_strings = [(name, str(value)) for name, value in record.to_properties()]
    assert CompileRecord.from_properties(as_strings) == [record]
    assert CompileRecord.from_properties([("torch_compile.x.compiles", "many")]) == []
    lines = render_table([record])
    assert lines[0].split() == ["test", "compiles", "recompiles", "graph", "breaks", "compile",
                                "time", "verdict"]  # fmt: skip
    assert lines[2].split() == ["t.py::test_x", "2", "1", "0", "0.25", "s", "over", "budget"]
