"""Reading torch's words: a graph break's reason split into its parts and its fix, guard
reasons cleaned of dynamo's bookkeeping, the fix for each recompile."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import torch._dynamo

from pytest_torch.perf.compilation.checks import CompileBudget, judge
from pytest_torch.perf.compilation.graph_breaks import fix_for, parse_reason
from pytest_torch.perf.compilation.recompiles import clean_guard_reason, recompile_fix
from pytest_torch.perf.compilation.watch import CompileReport, CompileWatch, Recompile

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def _eager(fn):
    return torch.compile(fn, backend="eager")


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
