"""The torch.compile engines: the watch, the diagnosis of graph breaks and recompiles,
assert_no_graph_breaks, the budget and its record (counts only: no test here depends on
how fast the machine compiles)."""

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
    CompileRecord,
    GraphBreakError,
    assert_no_graph_breaks,
    judge,
    parse_budget,
    render_table,
)
from pytest_torch.perf.compilation.graph_breaks import fix_for, parse_reason
from pytest_torch.perf.compilation.recompiles import clean_guard_reason, recompile_fix
from pytest_torch.perf.compilation.watch import CompileReport, CompileWatch, Recompile, warm_up

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


# -- the watch ---------------------------------------------------------------------------


def test_recompiles_are_counted_with_the_reason_and_the_call_site():
    model = _eager(torch.nn.Linear(4, 4))
    with CompileWatch() as watch:
        for batch in (8, 16, 32):  # 16 recompiles; then the batch dimension is dynamic
            model(torch.randn(batch, 4))
    report = watch.report
    assert report.compiles == 2 and len(report.recompiles) == 1
    (recompile,) = report.recompiles
    assert recompile.reasons == ["tensor 'args[0]' size mismatch at index 0. expected 8, actual 16"]
    assert recompile.call_site is not None
    assert recompile.call_site.source == "model(torch.randn(batch, 4))"
    assert report.graph_breaks == [] and report.limit_hits == []


def test_counts_do_not_depend_on_what_was_compiled_before():
    def step(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sum(dim=0)

    compiled = _eager(step)

    def counts() -> tuple[int, int]:
        with CompileWatch() as watch:
            compiled(torch.randn(8, 3))
            compiled(torch.randn(16, 3))
        return watch.report.compiles, len(watch.report.recompiles)

    alone = counts()
    for batch in (8, 16, 24, 40):  # everything the watched code will see, and more
        compiled(torch.randn(batch, 3))
    assert counts() == alone == (2, 1)


def _compile_then_fail() -> None:
    with CompileWatch():
        torch._dynamo.config.capture_scalar_outputs = True
        torch._functorch.config.activation_memory_budget = 0.5
        torch.compiler.config.job_id = "a-test"
        torch.compiler.set_stance("force_eager")
        torch._logging.set_logs(recompiles=True, dynamo=logging.INFO)
        _eager(lambda x: x + 1)(torch.randn(2))
        raise RuntimeError("the test's own")


def test_counts_do_not_depend_on_a_shape_profile_kept_on_disk(tmp_path, monkeypatch):
    # with a job id, dynamo keeps which dimensions turned dynamic in a file, across runs
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    previous = torch.compiler.config.job_id
    torch.compiler.config.job_id = f"pytest-torch-{tmp_path.name}"
    try:

        def grow(x: torch.Tensor) -> torch.Tensor:
            return x.cumsum(0) * 3

        compiled = _eager(grow)
        for batch in (8, 16, 24):  # batch becomes dynamic, and the profile says so
            compiled(torch.randn(batch, 2))
        torch._dynamo.reset()
        with CompileWatch() as watch:
            compiled(torch.randn(8, 2))
            compiled(torch.randn(16, 2))
        assert (watch.report.compiles, len(watch.report.recompiles)) == (2, 1)
    finally:
        torch.compiler.config.job_id = previous
        torch._dynamo.reset()


def test_configuration_and_callbacks_are_put_back_also_after_an_error():
    from torch._dynamo.callback import callback_handler

    def mine(*args: object) -> None:
        return None

    callback_handler.register_start_callback(mine)
    try:
        with pytest.raises(RuntimeError, match="the test's own"):
            _compile_then_fail()
        assert torch._dynamo.config.capture_scalar_outputs is False
        assert torch._functorch.config.activation_memory_budget == 1.0
        assert torch.compiler.config.job_id is None
        assert torch._dynamo.eval_frame._stance.stance == "default"
        from torch._logging._internal import log_state

        assert "recompiles" not in log_state.artifact_names
        assert "torch._dynamo" not in log_state.log_qname_to_level
        assert logging.getLogger("torch._dynamo").level == logging.NOTSET
        assert mine in callback_handler.start_callbacks
        assert len(callback_handler.start_callbacks) == 1
    finally:
        callback_handler.remove_start_callback(mine)


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


def test_a_watch_inside_a_watch_leaves_the_outer_one_watching():
    with CompileWatch() as outer:
        assert_no_graph_breaks(torch.nn.Linear(4, 4), torch.randn(2, 4))
        torch.compiler.reset()  # the test's own reset, after the inner watch
        model = _eager(torch.nn.Linear(4, 4))
        model(torch.randn(8, 4))
        model(torch.randn(16, 4))
    assert outer.report.compiles == 3 and len(outer.report.recompiles) == 1


def _training_step_report() -> CompileReport:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

    @torch.compile(backend="eager")
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    with CompileWatch() as watch:
        for _ in range(2):
            step(torch.randn(8, 16), torch.randn(8, 1))
            scheduler.step()
    return watch.report


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_a_compiled_training_step_gets_training_advice():
    message = judge("t::x", _training_step_report(), CompileBudget(), "m")
    assert message is not None
    # the scheduler changed a learning rate baked into the compiled step
    assert "guard failed: self.param_groups[0]['lr'] == 0.001" in message
    assert "lr=torch.tensor(1e-3)" in message
    assert "torch does not trace `Optimizer.zero_grad` on purpose" in message
    assert "call loss.backward() after it" in message
    # the break inside torch's optimizer is shown at the user's call, not "remove it"
    assert "optimizer.step()  (inside torch" in message
    assert "remove it" not in message


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


def test_the_one_time_start_is_paid_once_per_backend_and_never_fails():
    traced = []

    def counting(graph_module, example_inputs):
        traced.append(graph_module)
        return graph_module.forward

    def broken(graph_module, example_inputs):
        raise RuntimeError("no compiler here")

    warm_up((counting, broken))
    warm_up((counting, broken))
    assert len(traced) == 1
    torch._dynamo.reset()


def test_hitting_the_recompile_limit_is_reported(caplog):
    compiled = _eager(lambda x: x.sum() * 2)
    with CompileWatch() as watch:
        for rank in range(1, 11):  # a new rank every call: no dynamic shape helps
            compiled(torch.randn(*[2] * rank))
    report = watch.report
    assert report.limit_hits and "recompile limit" in report.limit_hits[0]
    message = judge("t.py::test", report, CompileBudget(recompiles=100), "torch_compile_budget")
    assert message is not None and "the recompile limit was hit" in message
    assert "from then on it ran uncompiled" in message


# -- reading torch's words -----------------------------------------------------------------

PRINT_REASON = """Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str'] (has_kwargs False)
  Hint: Avoid calling builtin `print` with argument types ['str']. Consider using an equivalent alternative function/method to `print`.

  Developer debug context: builtin print [<class 'ConstantVariable'>] False

 For more details about this graph break, please visit: https://meta-pytorch.github.io/compile-graph-break-site/gb/gb0059.html"""


def test_torchs_reason_is_split_into_type_explanation_hints_and_link():
    title, explanation, hints, link = parse_reason(PRINT_REASON)
    assert title == "Failed to trace builtin operator"
    assert explanation.startswith("Dynamo does not know how to trace builtin operator `print`")
    assert hints[0].startswith("Avoid calling builtin `print`")
    assert link.endswith("/gb/gb0059.html")
    assert parse_reason("generic_jump TensorVariable()")[0] == "Data-dependent branching"


def test_an_unknown_cause_gets_torchs_first_hint():
    assert fix_for("Something new", "", ["Try this first", "then that"]) == "Try this first"
    assert fix_for("Something new", "", []) == ""
    builtin = fix_for("Failed to trace builtin operator", "operator `divmod` with", [])
    assert builtin.startswith("dynamo cannot trace the builtin `divmod`")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (
            "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16",
            "tensor 'x' size mismatch at index 0. expected 8, actual 16",
        ),
        (
            "0/0: scale == 0.5        # return x * scale  # m.py:3 in forward\n"
            'User stack trace:\n  File "m.py", line 3',
            "scale == 0.5",
        ),
        ("1/2: GLOBAL_STATE changed: grad_mode ", "GLOBAL_STATE changed: grad_mode"),
        (
            "0/0: 2 <= images.size()[0] <= 15  # return F.conv2d(  # conv.py:560 in"
            " _conv_forward (the guard itself is not due user code but due to 0/1"
            " specialization in the framework; to avoid specialization try"
            " torch._dynamo.decorators.mark_unbacked(tensor, dim)) and return F.conv2d(",
            "2 <= images.size()[0] <= 15",
        ),
    ],
)
def test_guard_reasons_lose_dynamos_bookkeeping(raw, clean):
    assert clean_guard_reason(raw) == clean


@pytest.mark.parametrize(
    ("reason", "fix"),
    [
        ("tensor 'args[0]' size mismatch at index 0. expected 8, actual 16", "1st positional"),
        ("tensor 'x' size mismatch at index 1. expected 8, actual 16", "mark_dynamic(tensor, 1)"),
        ("tensor 'x' dtype mismatch. expected Float, actual Double", "cast inputs to one dtype"),
        ("tensor 'x' requires_grad mismatch. expected requires_grad=0", "needs gradients"),
        ("GLOBAL_STATE changed: grad_mode", "torch.no_grad() or torch.inference_mode()"),
        ("tensor 'x' rank mismatch. expected 2, actual 3", "number of dimensions"),
        ("scale == 0.5", "torch compiles once more with it as a dynamic value"),
        ("n == 2; n == 1", "'n' is fixed by the code it enters"),
        ("G['cfg'].temperature == 1.0", "'cfg.temperature' was baked into the graph"),
        ("G['cfg'].steps == 3", "the global int 'cfg.steps' is baked"),
        ("___stack0.stop == 3", "capture_scalar_outputs = True with dynamic=True"),
        (
            "_has_dynamo_dim_marking is present on runtime tensor but was absent at compile time",
            "mark the same dimensions before every call",
        ),
        (
            "_dynamo_unbacked_indices should be absent but is present on runtime tensor",
            "mark the same dimensions before every call",
        ),
        ("G['SCALE'] == 1", "the global int 'SCALE' is baked into the graph"),
        ("len(xs) == 2", "the length of 'xs' (a list, tuple or dict)"),
        (
            "tensor 'fn._parameters['bias']' size mismatch at index 0. expected 4, actual 2."
            " Guard failed on a parameter, consider using"
            " torch._dynamo.config.force_parameter_static_shapes = False",
            "modules of one class share their compiled code",
        ),
        (
            "tensor 'fn._parameters['bias']' size mismatch at index 0. expected 4, actual 1.",
            "modules of one class share their compiled code",
        ),
        ("cfg['scale'] == 1", "or pass it as a tensor (torch.tensor(value))"),
        ("self.config.use_cache == True", "the setting 'self.config.use_cache' changed"),
        ("GLOBAL_STATE changed: autocast(cpu)_enabled", "torch.autocast was switched"),
        ("GLOBAL_STATE changed: deterministic_algorithms", "a global torch setting"),
        ("self._modules['net']._modules['1'].alpha == 2.5", "'self.net.1.alpha' was baked"),
        ("self._modules['net'].steps == 2", "allow_unspec_int_on_nn_module = True"),
        ("n_layers == 3", "the Python int 'n_layers' was baked"),
        ("self.param_groups[0]['lr'] == 0.001", "lr=torch.tensor(1e-3)"),
        ("self._modules['net'].training == True", "switched between train() and eval()"),
        ("tensor 'x' stride mismatch at index 0. expected 4, actual 1", ".contiguous()"),
        ("tensor 'k' stride mismatch at index 0. expected 8, actual 16", "a preallocated"),
        (
            "tensor 'args[0]' dispatch key set mismatch. expected DispatchKeySet(CPU,"
            " BackendSelect, ADInplaceOrView, AutogradCPU), actual DispatchKeySet(CPU,"
            " BackendSelect)",
            "under torch.inference_mode() (an inference tensor)",
        ),
        (
            "tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, AutogradCPU),"
            " actual DispatchKeySet(CPU, Conjugate, AutogradCPU)",
            ".resolve_conj()",
        ),
        ("self.param_groups[0]['betas'][0] == 0.95", "cycle_momentum=False"),
        ("self.param_groups[0]['momentum'] == 0.85", "cycle_momentum=False"),
        ("CodeGuardAccessor: Not a function on act.__code__", "passed as 'act'"),
        (
            "expected type of 'bias' to be a tensor type, but found <class 'NoneType'>",
            "'bias' was None in one call and not in another",
        ),
        ("___stack0 == 3.6960532665252686", "a value read on the host (.item()"),
        ("2 <= images.size()[0] <= 15", "holds only for sizes 2..15"),
        ("2 <= x.size()[1] <= 128", "torch.cond"),
        ("16 <= x.size()[0]", "min= or max= given to mark_dynamic"),
        ("2 <= x.size()[0]", "mark_unbacked(tensor, 0)"),
        ("tensor 'x' size mismatch at index 0. expected 32, actual 1", "sizes 0 and 1 are"),
        ("tensor 'k' size mismatch at index 1. expected 0, actual 1", "mark_unbacked(tensor, 1)"),
        ("tensor 'x' size mismatch at index 0. expected 32, actual 4", "drop_last=True"),
        ("tensor 'x' size mismatch at index 0. expected 4, actual 32", "mark_dynamic(tensor, 0)"),
        (
            "tensor 'batch['ids']' size mismatch at index 1. expected 5, actual 7",
            "'ids']\" changes",
        ),
        ("tensor '___stack0' size mismatch at index 0. expected 8, actual 9", "nonzero"),
        ("attention_mask is None", "'attention_mask' was None in one call"),
        ("something torch adds next year", ""),
    ],
)
def test_recompile_fixes(reason, fix):
    found = recompile_fix(reason.split("; "))
    assert (fix in found) if fix else found == ""


def test_a_guard_failing_first_in_two_recompiles_was_fixed_again_by_the_code():
    def recompile(number: int, reason: str) -> Recompile:
        return Recompile(f"3/{number}", "forward (m.py:3)", [reason], None)

    dropout = [recompile(1, "p == 0.1"), recompile(2, "p == 0.2")]
    message = judge("t::x", CompileReport(compiles=3, recompiles=dropout), CompileBudget(), "m")
    assert message is not None and "'p' is fixed by the code it enters" in message
    assert "torch compiles once more" not in message
    sizes = [
        recompile(n, f"tensor 'x' size mismatch at index 0. expected {e}, actual {a}")
        for n, (e, a) in enumerate([(16, 10), (10, 7)], 1)
    ]
    message = judge("t::x", CompileReport(compiles=3, recompiles=sizes), CompileBudget(), "m")
    assert message is not None and "compiles again for each size" in message
    # one recompile each in two compiled functions is no repetition
    other = [recompile(1, "p == 0.1"), Recompile("4/1", "", ["p == 0.1"], None)]
    message = judge("t::x", CompileReport(compiles=4, recompiles=other), CompileBudget(), "m")
    assert message is not None and "is fixed by the code" not in message


def test_a_growing_batch_is_no_last_batch():
    assert "drop_last" not in recompile_fix(
        ["tensor 'x' size mismatch at index 0. expected 4, actual 32"]
    )


def test_a_range_guard_is_not_answered_with_mark_unbacked():
    # marking it unbacked turns a branch on the size into a graph break
    assert "mark_unbacked" not in recompile_fix(["2 <= x.size()[1] <= 128"])


def test_with_graph_breaks_the_size_fix_is_maybe_mark_dynamic():
    reason = ["tensor 'scores' size mismatch at index 0. expected 8, actual 16"]
    assert "torch._dynamo.mark_dynamic(tensor, 0)" in recompile_fix(reason)
    assert "maybe_mark_dynamic(tensor, 0)" in recompile_fix(reason, broken=True)


def test_after_a_break_a_tensor_made_before_it_is_not_an_argument():
    reason = ["tensor 'pos' size mismatch at index 0. expected 29, actual 32"]
    assert "made before a graph break" in recompile_fix(reason, frozenset({"scores"}))
    reason = ["tensor 'scores' size mismatch at index 0. expected 29, actual 32"]
    assert "mark it dynamic" in recompile_fix(reason, frozenset({"scores"}))
    reason = ["tensor 'self._modules['proj']._parameters['weight']' size mismatch at index 0."]
    assert "made before a graph break" not in recompile_fix(reason, frozenset({"self", "x"}))


def test_the_code_after_a_break_knows_its_functions_parameters():
    def positive_mean(scores: torch.Tensor, *, scale: float = 2.0) -> torch.Tensor:
        pos = scores[scores > 0]
        print("n positive", pos.shape[0])
        return pos.mean() * scale

    compiled = _eager(positive_mean)
    with contextlib.redirect_stdout(io.StringIO()), CompileWatch() as watch:
        for size in (64, 65, 66, 67):
            compiled(torch.randn(size))
    after = [item for item in watch.report.recompiles if "after its graph break" in item.function]
    assert after, [item.function for item in watch.report.recompiles]
    assert {item.after_break_parameters for item in after} == {frozenset({"scores", "scale"})}
    whole = [item for item in watch.report.recompiles if item not in after]
    assert all(item.after_break_parameters is None for item in whole)


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
