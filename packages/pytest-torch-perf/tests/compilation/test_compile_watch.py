"""The compile watch: compiles and recompiles counted with their reasons and call sites,
torch's state put back, the one-time start, the recompile limit (counts only: no test here
depends on how fast the machine compiles)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo

from pytest_torch.perf.compilation.checks import CompileBudget, assert_no_graph_breaks, judge
from pytest_torch.perf.compilation.watch import CompileReport, CompileWatch, warm_up

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def _eager(fn):
    return torch.compile(fn, backend="eager")


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
