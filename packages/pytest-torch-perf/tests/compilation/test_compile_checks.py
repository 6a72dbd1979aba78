"""assert_no_graph_breaks and what it tells of a graph break: where it is, its cause and its fix
(counts only: no test here depends on how fast the machine compiles)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import logging
import sys
import warnings
import zlib

import pytest
import torch
import torch._dynamo

from pytest_torch.perf.compilation.checks import (
    CompileBudget,
    GraphBreakError,
    assert_no_graph_breaks,
    judge,
)
from pytest_torch.perf.compilation.watch import CompileWatch

log = logging.getLogger("a_model")

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


class Printing(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        print("batch", y.shape)  # the line reported
        return y.relu()


def _eager(fn):
    return torch.compile(fn, backend="eager")


# -- assert_no_graph_breaks --------------------------------------------------------------


def test_one_graph_passes_and_returns_the_result():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    x = torch.randn(2, 4)
    out = assert_no_graph_breaks(model, x)
    torch.testing.assert_close(out, model(x))


def test_a_print_is_reported_at_the_users_line_with_the_fix(capsys):
    with pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(Printing(), torch.randn(2, 4))
    message = str(caught.value)
    assert message.startswith(
        "expected Printing.forward to compile into one graph; torch.compile broke it 1 time"
    )
    line = inspect.getsourcelines(Printing.forward)[1] + 2
    assert f'test_compile_checks.py:{line}  print("batch", y.shape)  # the line reported' in message
    assert "torch: Failed to trace builtin operator" in message
    assert "fix: printing inside compiled code ends the graph there" in message
    assert "torch.compiler.is_compiling()" in message
    capsys.readouterr()


def _branchy(x: torch.Tensor) -> torch.Tensor:
    if x.sum().item() > 0:
        return x * 2
    return x


def _data_dependent(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:
        return x * 2
    return x


def _logs(x: torch.Tensor) -> torch.Tensor:
    log.warning("shape %s", x.shape)
    return x * 2


def _c_extension(x: torch.Tensor) -> torch.Tensor:
    return x * (zlib.crc32(b"ab") % 3)


def _warns(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("inputs look unnormalised", stacklevel=1)
    return x * 2


@torch.compiler.disable
def _excluded(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def _calls_excluded(x: torch.Tensor) -> torch.Tensor:
    return _excluded(x * 2) * 3


def _explicit(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    torch._dynamo.graph_break()
    return x + 1


@pytest.mark.parametrize(
    ("fn", "source", "fix"),
    [
        (_branchy, "if x.sum().item() > 0:", "capture_scalar_outputs = True"),
        (_data_dependent, "if x.sum() > 0:", "torch.where(cond, a, b)"),
        (_logs, 'log.warning("shape %s", x.shape)', "logging inside compiled code"),
        (_c_extension, 'return x * (zlib.crc32(b"ab") % 3)', "`zlib.crc32` cannot be traced"),
        (_calls_excluded, "return _excluded(x * 2) * 3", "torch.compiler.disable"),
        (_warns, "warnings.warn(", "the warnings module (warnings.warn, catch_warnings"),
        (_explicit, "torch._dynamo.graph_break()", "explicit torch._dynamo.graph_break()"),
    ],
)
def test_each_known_cause_gets_its_fix(fn, source, fix, caplog):
    with (
        pytest.raises(GraphBreakError) as caught,
        pytest.warns() if fn in (_c_extension, _warns) else _no(),
    ):
        assert_no_graph_breaks(fn, torch.randn(3))
    message = str(caught.value)
    assert f"  {source}" in message, message
    assert fix in message, message


class _no:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


def test_an_already_compiled_module_is_checked_as_the_original(capsys):
    compiled = torch.compile(Printing(), backend="eager")
    with pytest.raises(GraphBreakError, match=r"Printing\.forward"):
        assert_no_graph_breaks(compiled, torch.randn(2, 4))
    capsys.readouterr()


def test_the_users_own_error_is_not_replaced():
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("bad input shape")

    with pytest.raises(ValueError, match="bad input shape"):
        assert_no_graph_breaks(broken, torch.randn(2))


def test_not_callable_is_a_clear_type_error():
    with pytest.raises(TypeError, match=r"expected a function or an nn\.Module to compile, got"):
        assert_no_graph_breaks(torch.randn(2), torch.randn(2))  # type: ignore[arg-type]


def test_compile_switched_off_is_said_not_passed():
    torch._dynamo.config.disable = True
    try:
        with pytest.raises(GraphBreakError) as caught:
            assert_no_graph_breaks(torch.nn.Linear(2, 2), torch.randn(1, 2))
    finally:
        torch._dynamo.config.disable = False
    assert "compiled nothing of Linear.forward" in str(caught.value)
    assert "TORCHDYNAMO_DISABLE=1" in str(caught.value)
    with torch.compiler.set_stance("force_eager"), pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(torch.nn.Linear(2, 2), torch.randn(1, 2))
    assert 'switched off in this process (torch.compiler.set_stance("force_eager"))' in str(
        caught.value
    )


def test_a_reset_inside_the_watched_code_loses_nothing():
    from torch._dynamo.callback import callback_handler

    with CompileWatch() as watch:
        _eager(Printing())(torch.randn(8, 4))  # a graph break, then a reset
        torch.compiler.reset()
        model = _eager(torch.nn.Linear(4, 4))
        model(torch.randn(8, 4))
        model(torch.randn(16, 4))  # a recompile after the reset
    report = watch.report
    assert report.compiles == 4 and len(report.recompiles) == 1
    assert report.graph_break_count == 1
    assert report.recompiles[0].reasons == [
        "tensor 'args[0]' size mismatch at index 0. expected 8, actual 16"
    ]
    assert "clear" not in callback_handler.__dict__ and callback_handler.start_callbacks == []


def test_graph_breaks_are_counted_once_per_place():
    model = _eager(Printing())
    with CompileWatch() as watch:
        model(torch.randn(8, 4))
        model(torch.randn(16, 4))  # compiles again, and breaks at the same print
    report = watch.report
    assert report.graph_break_count == 1
    assert report.graph_breaks[0].count == 2
    assert report.compiles == 4 and len(report.recompiles) == 2


@contextlib.contextmanager
def _section(name: str):
    yield name


class _PrintsInAWithBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with _section("body"):
            y = self.linear(x)
            print("batch", y.shape)  # the line reported
        return y.relu()


class _BranchesInATryBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            y = self.linear(x)
            if y.sum() > 0:  # the line reported
                y = y * 2
        except RuntimeError:
            y = x
        return y.relu()


class _Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.rnn = torch.nn.LSTM(4, 4, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.rnn(self.embed(ids))  # the line reported
        return hidden.mean(dim=1)


def _graphs_made(model: torch.nn.Module, *inputs: torch.Tensor) -> int:
    """torch's own answer: how many graphs reach the backend."""
    graphs = []

    def count(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.compile(model, backend=count)(*inputs)
    finally:
        torch._dynamo.reset()
    return len(graphs)


@pytest.mark.parametrize(
    ("model", "inputs", "source"),
    [
        (_PrintsInAWithBlock, (torch.randn(2, 4),), 'print("batch", y.shape)'),
        (_BranchesInATryBlock, (torch.randn(2, 4),), "if y.sum() > 0:"),
        (_Tagger, (torch.randint(0, 10, (2, 5)),), "hidden, _ = self.rnn(self.embed(ids))"),
    ],
    ids=["print-in-with", "branch-in-try", "lstm"],
)
def test_a_function_torch_gives_up_on_is_a_break_not_one_graph(model, inputs, source, capsys):
    """A break torch cannot resume from makes it run the whole function uncompiled and
    writes no graph-break record: it must not pass as one graph."""
    graphs = _graphs_made(model(), *inputs)
    with pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(model(), *inputs)
    message = str(caught.value)
    assert "torch.compile broke it 1 time" in message, message
    assert f"  {source}" in message, message
    gave_up = f"test_compile_checks.py:{_first_line(model.forward)}) ran uncompiled"
    assert (gave_up in message and "so `forward` (" in message) == (graphs == 0), (
        graphs,
        message,
    )
    with CompileWatch() as watch:
        _eager(model())(*inputs)
    assert watch.report.graph_break_count == 1
    budget = CompileBudget(recompiles=0, graph_breaks=0)
    verdict = judge("t.py::test", watch.report, budget, "torch_compile_budget")
    assert verdict is not None and "graph breaks: 1, allowed 0" in verdict
    capsys.readouterr()


def _logs_after_the_work(x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).relu()
    log.info("done")  # the line reported
    return y


def test_a_break_outside_all_tensor_work_fails_and_says_nothing_was_split(caplog):
    assert _graphs_made(_logs_after_the_work, torch.randn(3)) == 1  # torch: one graph
    with pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(_logs_after_the_work, torch.randn(3))
    message = str(caught.value)
    assert message.startswith(
        "expected _logs_after_the_work to compile with no graph break; torch.compile broke"
        " it 1 time (it still made one graph: the break fell outside its tensor work"
    ), message
    assert '  log.info("done")' in message
    assert "between graphs" not in message


def test_a_split_graph_says_how_many_graphs(capsys):
    with pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(Printing(), torch.randn(2, 4))
    assert "broke it 1 time and made 2 graphs:" in str(caught.value)
    capsys.readouterr()


def test_code_without_tensor_work_is_nothing_to_check():
    with pytest.raises(GraphBreakError, match="made no graph: it found no tensor operation"):
        assert_no_graph_breaks(torch.nn.Identity(), torch.randn(3))


class _QuietWrapper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the line reported
            return self.body(x)


def test_a_frame_given_up_on_at_a_listed_break_is_that_break():
    """torch lists the break, then gives up on the frame with a reason of its own at the
    same line ("Reconstruction failure"): one break, which made forward run uncompiled."""
    with pytest.raises(GraphBreakError) as caught:
        assert_no_graph_breaks(_QuietWrapper(), torch.randn(2, 4))
    message = str(caught.value)
    assert "broke it 1 time" in message, message
    assert '  warnings.simplefilter("ignore")' in message
    assert "so `forward` (" in message and "ran uncompiled" in message
    assert "the warnings module" in message


def _first_line(function) -> int:
    return inspect.getsourcelines(function)[1]


_LIBRARY = """
import torch

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        if y.mean() > 0:
            y = y * 2
        return y
"""


def test_a_break_inside_a_library_counts_once_at_the_users_call(tmp_path, monkeypatch):
    """dynamo meets a library's break twice: inlined in the user's function, then when
    it compiles the library's function on its own; one break, at the user's call."""
    package = tmp_path / "site-packages" / "fake_graph_lib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_LIBRARY)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delitem(sys.modules, "fake_graph_lib", raising=False)
    library = importlib.import_module("fake_graph_lib")

    class UsesLibrary(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = library.Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.block(x.relu()) + 1

    try:
        with CompileWatch() as watch:
            _eager(UsesLibrary())(torch.randn(2, 4))
    finally:
        sys.modules.pop("fake_graph_lib", None)
    breaks = watch.report.graph_breaks
    assert len(breaks) == 1, [item.describe() for item in breaks]
    assert breaks[0].count == 1  # one call, one break: not "[in 2 compiles]"
    place = breaks[0].place
    assert place is not None and place.source == "return self.block(x.relu()) + 1"
    assert place.via == "fake_graph_lib/__init__.py:11"
