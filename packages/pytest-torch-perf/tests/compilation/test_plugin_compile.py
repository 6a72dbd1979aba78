"""@pytest.mark.torch_compile_budget in real runs: budgets judged on counts (never on how
fast this machine compiles), bad markers, the end-of-run table, JUnit and xdist."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.usefixtures("torch_seed")

MODELS = """
import pytest
import torch


class Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        print("batch", y.shape)
        return y.relu()


def compiled(model):
    return torch.compile(model, backend="eager")
"""


def test_recompiles_over_budget_fail_with_the_reason_the_call_and_the_fix(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.mark.torch_compile_budget(recompiles=0)
def test_batches():
    model = compiled(torch.nn.Linear(4, 4))
    for batch in (8, 16):
        model(torch.randn(batch, 4))


@pytest.mark.torch_compile_budget(recompiles=1)
def test_batches_allowed():
    model = compiled(torch.nn.Linear(4, 4))
    for batch in (8, 16, 32):
        model(torch.randn(batch, 4))
"""
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_batches: over its torch.compile budget (recompiles <= 0, graph breaks <= 0)",
            "recompiles: 1, allowed 0",
            "  1. recompiled at test_recompiles_over_budget_fail_with_the_reason_the_call_and_the_fix.py:*"
            "  model(torch.randn(batch, 4))",
            "     guard failed: tensor 'args[0]' size mismatch at index 0. expected 8, actual 16",
            "     fix: dimension 0 of the 1st positional argument changes between calls: mark it"
            " dynamic before the first call, with every input whose size goes with it"
            " (torch._dynamo.mark_dynamic(tensor, 0)), compile with dynamic=True*",
            "*- torch compile -*",
            "test * compiles * recompiles * graph breaks * compile time * verdict",
            "*::test_batches * 2 * 1 * 0 * s * over budget",
            "*::test_batches_allowed * 2 * 1 * 0 * s * ok",
        ]
    )


def test_graph_breaks_are_listed_at_the_users_line(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.mark.torch_compile_budget
def test_printing():
    compiled(Printing())(torch.randn(8, 4))


@pytest.mark.torch_compile_budget(graph_breaks=1)
def test_one_break_allowed():
    compiled(Printing())(torch.randn(8, 4))
"""
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "graph breaks: 1, allowed 0",
            '  1. test_graph_breaks_are_listed_at_the_users_line.py:12  print("batch", y.shape)',
            "     torch: Failed to trace builtin operator: *`print`*",
            "     fix: printing inside compiled code ends the graph there*",
            "*::test_one_break_allowed * 2 * 0 * 1 * s * ok",
            "*::test_printing * 2 * 0 * 1 * s * over budget",
        ]
    )


def test_counts_are_the_same_whatever_ran_before(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
MODEL = compiled(torch.nn.Linear(4, 4))


def test_warms_the_cache():
    for batch in (8, 16, 32):
        MODEL(torch.randn(batch, 4))


@pytest.mark.torch_compile_budget(recompiles=1)
def test_watched():
    MODEL(torch.randn(8, 4))
    MODEL(torch.randn(16, 4))
"""
    )
    together = run()
    together.assert_outcomes(passed=2)
    alone = run("-k", "test_watched")
    alone.assert_outcomes(passed=1, deselected=1)
    for result in (together, alone):
        result.stdout.fnmatch_lines(["*::test_watched * 2 * 1 * 0 * s * ok"])


def test_what_a_test_changes_in_dynamos_config_is_put_back(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.mark.torch_compile_budget
def test_changes_config():
    torch._dynamo.config.capture_scalar_outputs = True
    compiled(torch.nn.Linear(4, 4))(torch.randn(8, 4))


def test_sees_the_default():
    assert torch._dynamo.config.capture_scalar_outputs is False
"""
    )
    run().assert_outcomes(passed=2)


def test_a_failing_test_keeps_its_own_failure(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.mark.torch_compile_budget
def test_wrong_output():
    for batch in (8, 16):  # over budget too: the test's own failure comes first
        out = compiled(torch.nn.Linear(4, 4))(torch.randn(batch, 4))
    assert out.shape == (8, 5), "the model's own check"


@pytest.mark.torch_compile_budget
def test_skips_itself():
    compiled(torch.nn.Linear(4, 4))(torch.randn(8, 4))
    pytest.skip("no data for this case")
"""
    )
    result = run("-rs")
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "E * AssertionError: the model's own check",
            "*::test_skips_itself * 1 * 0 * 0 * s * skipped",
            "*::test_wrong_output * 2 * 1 * 0 * s * test failed",
            "SKIPPED * no data for this case",
        ]
    )
    result.stdout.no_fnmatch_line("*over its torch.compile budget*")


def test_a_marked_test_that_compiles_nothing_says_so(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.fixture(scope="module")
def warm_model():
    model = compiled(torch.nn.Linear(4, 4))
    model(torch.randn(8, 4))
    return model


@pytest.mark.torch_compile_budget
def test_forgot_to_compile():
    torch.nn.Linear(4, 4)(torch.randn(8, 4))


@pytest.mark.torch_compile_budget
def test_compiled_in_a_fixture(warm_model):
    warm_model(torch.randn(8, 4))  # compiles again: the test starts from an empty cache
"""
    )
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_forgot_to_compile: @pytest.mark.torch_compile_budget watched the test"
            " body, but torch.compile compiled nothing in it, so there was nothing to check."
            " torch.compile is lazy*",
            "*::test_forgot_to_compile * 0 * 0 * 0 * s * compiled nothing",
        ]
    )


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            "recompiles=-1",
            "recompiles= must be a whole number >= 0 (how many are allowed), got -1.",
        ),
        ("graph_breaks=0.5", "graph_breaks= must be a whole number >= 0 (how many are allowed)*"),
        ("seconds=0", "seconds= must be a number of seconds > 0 (the longest time*got 0.*"),
        ("seconds='60'", "seconds= must be a number of seconds > 0*got '60'.*"),
        ("recompile=1", "got unknown keyword(s) recompile; it takes recompiles=, graph_breaks=*"),
        ("0, 0, 10, 5", "takes recompiles, graph_breaks and seconds once.*"),
    ],
)
def test_bad_markers_fail_collection_naming_the_test(pytester, run, arguments, error):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.torch_compile_budget({arguments})
        def test_x():
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*::test_x: @pytest.mark.torch_compile_budget*{error}*"])


def test_unittest_methods_are_watched_too(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
import unittest


class TestServing(unittest.TestCase):
    @pytest.mark.torch_compile_budget
    def test_batches(self):
        model = compiled(torch.nn.Linear(4, 4))
        for batch in (8, 16):
            model(torch.randn(batch, 4))

    @pytest.mark.torch_compile_budget(recompiles=-2)
    def test_bad_budget(self):
        pass
"""
    )
    result = run()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*::TestServing::test_batches: over its torch.compile budget*",
            "*::TestServing::test_bad_budget: @pytest.mark.torch_compile_budget: recompiles="
            " must be a whole number >= 0*",
        ]
    )


def test_listed_in_markers_help(pytester, run):
    result = run("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0, seconds=None):"
            " fail the test if torch.compile*"
        ]
    )


def test_figures_in_junit_and_under_xdist(pytester, run):
    pytester.makepyfile(
        MODELS
        + """
@pytest.mark.torch_compile_budget(recompiles=1)
def test_a():
    model = compiled(torch.nn.Linear(4, 4))
    model(torch.randn(8, 4))
    model(torch.randn(16, 4))


@pytest.mark.torch_compile_budget(graph_breaks=1)
def test_b():
    compiled(Printing())(torch.randn(8, 4))
"""
    )
    result = run("--junitxml=report.xml", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*- torch compile -*"])
    result.stdout.fnmatch_lines(["*::test_a * 2 * 1 * 0 * s * ok"])
    result.stdout.fnmatch_lines(["*::test_b * 2 * 0 * 1 * s * ok"])
    tree = ET.parse(pytester.path / "report.xml")
    properties = {
        p.get("name"): p.get("value")
        for p in tree.iter("property")
        if "::test_a." in p.get("name", "")
    }
    assert {
        (name.rsplit(".", 1)[1], value)
        for name, value in properties.items()
        if name.rsplit(".", 1)[1] in ("compiles", "recompiles", "graph_breaks", "verdict")
    } == {("compiles", "2"), ("recompiles", "1"), ("graph_breaks", "0"), ("verdict", "ok")}


@pytest.mark.cuda(reason="inductor generates Triton code for CUDA GPUs")
def test_on_a_gpu_with_the_default_backend(pytester, run):
    """inductor generating GPU code: a recompile and a graph break are still counted at
    the user's lines, the compile time includes code generation, and a clean model passes
    assert_no_graph_breaks on the GPU."""
    pytester.makepyfile(
        MODELS
        + """
from pytest_torch.perf import assert_no_graph_breaks


@pytest.mark.torch_compile_budget(recompiles=0, seconds=600)
def test_cuda_recompiles():
    model = torch.compile(Printing().cuda())
    for batch in (8, 16):
        model(torch.randn(batch, 4, device="cuda"))
    torch.cuda.synchronize()


def test_cuda_one_graph():
    block = torch.nn.TransformerEncoderLayer(64, 4, batch_first=True).cuda().eval()
    with torch.no_grad():
        out = assert_no_graph_breaks(block, torch.randn(2, 16, 64, device="cuda"))
    assert out.is_cuda
"""
    )
    _one_over_budget_one_clean(run(), "test_cuda_recompiles")


@pytest.mark.accelerator
def test_on_any_accelerator_with_aot_eager(pytester, run, accelerator):
    """torch.compile's health on the accelerator's tensors (aot_eager: any device has
    it): a recompile and a graph break are counted at the user's lines, and a clean
    model passes assert_no_graph_breaks there."""
    pytester.makepyfile(
        MODELS
        + f"""
from pytest_torch.perf import assert_no_graph_breaks

DEVICE = "{accelerator}"


@pytest.mark.torch_compile_budget(recompiles=0)
def test_device_recompiles():
    model = torch.compile(Printing().to(DEVICE), backend="aot_eager")
    for batch in (8, 16):
        model(torch.randn(batch, 4, device=DEVICE))


def test_device_one_graph():
    block = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()).to(DEVICE)
    out = assert_no_graph_breaks(block, torch.randn(2, 16, device=DEVICE))
    assert out.device.type == DEVICE
"""
    )
    _one_over_budget_one_clean(run(), "test_device_recompiles")


def _one_over_budget_one_clean(result, over: str) -> None:
    """The device tests' verdicts: ``over`` recompiled and broke its graph at the user's
    print, the other test passed."""
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "recompiles: *, allowed 0",
            "*guard failed: tensor * size mismatch at index 0. expected 8, actual 16",
            "graph breaks: 1, allowed 0",
            '*print("batch", y.shape)*',
            f"*::{over} * over budget",
        ]
    )
