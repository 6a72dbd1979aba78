"""The hostile-code catalogue of the determinism checks: real user code, odd outputs.

Each case is a small test file as a user would write it, run by pytest with the
determinism plugin. The verdict must be true (a deterministic model passes, whatever
its outputs look like; a nondeterministic one fails with the true cause and fitting
advice), an output that cannot be compared gets a message instead of a verdict, the
user's own failures survive as they are, and no traceback leads into the plugins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

# a traceback entry into the plugins reads "path/pytest_torch/...py:line: in name"
PLUGIN_FRAME = re.compile(r"pytest_torch[/\\]\S+\.py:\d+: in ")

HEADER = """
import dataclasses
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F

from pytest_torch.determinism import assert_deterministic, diagnose_nondeterminism
from pytest_torch.determinism.assertion import InputsChangedWarning


@pytest.fixture
def x(torch_seed):
    return torch.randn(4, 8)

"""


@dataclass
class Case:
    id: str
    source: str
    #: outcomes of the inner run, as RunResult.assert_outcomes takes them
    outcomes: dict[str, int]
    #: what the output must show, in this order ("*": anything in between)
    expect: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    #: fragments that must not appear
    forbid: tuple[str, ...] = ()


CASES = [
    Case(
        "distribution-output",
        """
class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return torch.distributions.Categorical(logits=self.head(x))


class NoisyPolicy(Policy):
    def forward(self, x):
        return torch.distributions.Normal(self.head(x), F.dropout(torch.ones(3), 0.5) + 1)


def test_deterministic(x):
    assert_deterministic(Policy(), x)
    assert diagnose_nondeterminism(Policy(), x).category == "Deterministic"


def test_noisy(x):
    assert_deterministic(NoisyPolicy(), x)
""",
        {"passed": 1, "failed": 1},
        (
            "E*not deterministic: run 2 of 5 differs from run 1 (same inputs, compared bitwise):",
            "E*output.scale: * of 12 elements differ (max abs difference *)",
        ),
        forbid=("NaN/Inf in one run only", "output.loc"),
    ),
    Case(
        "dataclass-and-namedtuple",
        """
@dataclasses.dataclass
class Step:
    loss: float
    logits: torch.Tensor
    tag: str


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


@pytest.fixture
def model(torch_seed):
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))


def test_dataclass(x, model):
    assert_deterministic(lambda: Step(0.5, model.eval()(x), "same"))


def test_namedtuple_names_the_field(x, model):
    assert_deterministic(lambda: Pair(x, model.train()(x)))
""",
        {"passed": 1, "failed": 1},
        ("E*output.right: * of 32 elements differ (max abs difference *)",),
        forbid=("output.left",),
    ),
    Case(
        "nested-dicts-with-plain-leaves",
        """
def test_plain_values_compare_with_eq(x):
    def forward():
        return {
            "out": {"y": x * 2, "mask": x > 0, "shape": x.shape},
            "meta": {"dtype": x.dtype, "device": x.device, "name": "run", "none": None},
            "loss": float("nan"),
            "ids": [1, 2, (3, 4)],
        }

    assert_deterministic(forward)
    assert diagnose_nondeterminism(forward).category == "Deterministic"


def test_a_plain_value_that_differs():
    calls = iter(range(10))
    assert_deterministic(lambda: {"step": next(calls)})
""",
        {"passed": 1, "failed": 1},
        ("E*output['step']: the value differs (compared with ==)",),
    ),
    Case(
        "object-with-broken-eq",
        """
class Meta:
    def __init__(self):
        self.names = ["a"]

    def __eq__(self, other):
        raise NotImplementedError("Meta cannot be compared")


def test_broken_eq(x):
    assert_deterministic(lambda: {"y": x + 1, "meta": Meta()})
""",
        {"failed": 1},
        (
            "E*pytest_torch.determinism.outputs.CannotCompare: assert_deterministic: cannot"
            " compare Meta at output['meta']: its == raised NotImplementedError: Meta cannot be"
            " compared; return tensors, values that compare with == (numbers, strings), or"
            " tuples, lists, dicts, named tuples, dataclasses or objects holding them.",
        ),
        forbid=("not deterministic",),
    ),
    Case(
        "tensor-like-without-tensors",
        """
class Lazy:
    # a tensor-like: == answers elementwise, and it holds no tensor to compare
    __slots__ = ()

    def __eq__(self, other):
        return [True, False]


def test_tensor_like(x):
    diagnose_nondeterminism(lambda t: Lazy(), x)
""",
        {"failed": 1},
        (
            "E*CannotCompare: diagnose_nondeterminism: cannot compare Lazy at output: its =="
            " returned list, not True or False; return tensors*",
        ),
        forbid=("Deterministic", "Outside torch"),
    ),
    Case(
        "generator-output",
        """
def test_generator(x):
    assert_deterministic(lambda: (row * 2 for row in x))
""",
        {"failed": 1},
        (
            "E*CannotCompare: assert_deterministic: cannot compare generator at output: an"
            " iterator (a generator, map, zip...) is used up when read*",
        ),
    ),
    Case(
        "in-place-input-via-kwargs",
        """
class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, *, x):
        x += self.proj(x)  # writes into the caller's tensor
        return x.relu()


def test_assert_is_fair(x):
    with pytest.warns(InputsChangedWarning, match=r"\\(input `kwargs\\['x'\\]`\\)"):
        assert_deterministic(Residual(), x=x)


def test_diagnosis_names_the_input(x):
    before = x.clone()
    result = diagnose_nondeterminism(Residual(), x=x)
    assert torch.equal(x, before)
    print(result.verdict)
    assert result.category == "Changes its inputs"
""",
        {"passed": 2},
        forbid=("not deterministic",),
    ),
    Case(
        "functional-dropout-in-eval",
        """
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return F.dropout(self.proj(x), p=0.2, training=True)


def test_advice(x):
    model = torch.nn.Sequential(Block(), torch.nn.Linear(8, 2)).eval()
    result = diagnose_nondeterminism(model, x)
    assert result.category == "Randomness-driven"
    assert "call model.eval() to turn dropout off" not in result.verdict
    assert "model.eval() does not affect a dropout function called with training=True; pass training=self.training" in result.verdict
    assert "in `0` (Block)" in result.verdict


def test_module_dropout_in_train_mode_is_told_to_call_eval(x):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.2)).train()
    assert "call model.eval() to turn dropout off" in diagnose_nondeterminism(model, x).verdict
""",
        {"passed": 2},
    ),
    Case(
        "batchnorm-in-train-mode",
        """
def test_running_stats_change_but_outputs_do_not(x):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert_deterministic(model, x)
    result = diagnose_nondeterminism(model, x)
    assert result.category == "Deterministic"
    assert "buffer `1.running_mean`" in result.verdict
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


class UsesRunningMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        return self.norm(x) + self.norm.running_mean


def test_outputs_that_read_running_stats(x):
    result = diagnose_nondeterminism(UsesRunningMean().train(), x)
    assert result.category == "State mutation"
    assert "Call model.eval() to use the running statistics (BatchNorm)" in result.verdict
""",
        {"passed": 2},
    ),
    Case(
        "nan-empty-complex-sparse",
        """
def test_nan_is_equal_to_nan(x):
    assert_deterministic(lambda: torch.log(x - 10))  # NaN in every run, at the same places
    assert diagnose_nondeterminism(lambda t: t.sqrt(), -x.abs()).category == "Deterministic"


def test_empty(x):
    assert_deterministic(lambda: (x[:0], torch.empty(0, 3), {"none": x.new_zeros(0)}))


def test_complex(x):
    assert_deterministic(torch.fft.rfft, x)
    assert_deterministic(lambda: torch.view_as_complex(x.reshape(4, 4, 2)).conj())


def test_sparse(x):
    assert_deterministic(lambda: (x * (x > 1)).to_sparse())
    assert_deterministic(lambda: (x * (x > 1)).to_sparse_csr())


def test_complex_noise_is_found(x):
    assert_deterministic(lambda: torch.fft.fft(x + torch.rand(()) * 1j))
""",
        {"passed": 4, "failed": 1},
        ("E*output: * of 32 elements differ (max abs difference *)",),
    ),
    Case(
        "object-holding-tensors",
        """
class Output:  # no == of its own, tensors in its attributes
    def __init__(self, logits, hidden):
        self.logits = logits
        self.hidden = hidden
        self.cache = {"step": 1}


def test_compared_by_its_tensors(x):
    layer = torch.nn.Linear(8, 8)
    assert_deterministic(lambda: Output(layer(x), [layer(x).tanh()]))


def test_the_differing_attribute_is_named(x):
    assert_deterministic(lambda: Output(x, [x + torch.rand(())]))
""",
        {"passed": 1, "failed": 1},
        ("E*output.hidden[0]: 32 of 32 elements differ (max abs difference *)",),
        forbid=("output.logits",),
    ),
    Case(
        "forward-raises-on-second-call",
        """
class Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def forward(self, x):
        if self.seen:
            raise KeyError("cache already filled")
        self.seen.add(1)
        return x


def test_assert(x):
    assert_deterministic(Cached(), x)


def test_diagnose(x):
    diagnose_nondeterminism(Cached(), x)
""",
        {"failed": 2},
        (
            "E*KeyError: 'cache already filled'",
            "E*assert_deterministic: raised in run 2 of 5",
            "E*KeyError: 'cache already filled'",
            "E*diagnose_nondeterminism: raised in run 2 of the experiment 'as called'*",
        ),
        forbid=("not deterministic", "CannotCompare"),
    ),
    Case(
        "torch-deterministic-refusal",
        """
def test_scatter(x):
    torch.zeros(4).put_(torch.tensor([0, 0]), x[0, :2])


def test_user_failure(x):
    assert x.sum() > 1e9, "the user's own assertion"
""",
        {"failed": 2},
        (
            "E*RuntimeError: put_ does not have a deterministic implementation, but you set"
            " 'torch.use_deterministic_algorithms(True)'*",
            "*- torch-deterministic -*",
            "--torch-deterministic turned deterministic algorithms on for this test (it uses"
            " torch_seed), and put_ has no deterministic implementation*",
            "Run this test as before with: pytest *test_case.py::test_scatter (without"
            " --torch-deterministic)",
            "*--torch-deterministic-warn-only*",
            "E*AssertionError: the user's own assertion",
        ),
        args=("--torch-deterministic",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_code(pytester: pytest.Pytester, case: Case) -> None:
    pytester.makepyfile(test_case=HEADER + case.source)
    result = pytester.runpytest("-p", "torch_determinism", "-p", "no:cacheprovider", *case.args)
    out = result.stdout.str()
    result.assert_outcomes(**case.outcomes)
    _in_order(out, case.expect)
    for fragment in case.forbid:
        assert fragment not in out, fragment
    assert not PLUGIN_FRAME.search(out), out
    assert "INTERNALERROR" not in out
    # the refusal section goes with the refused op only, never with the user's failure
    assert out.count("- torch-deterministic -") == (case.id == "torch-deterministic-refusal")


def _in_order(out: str, expected: tuple[str, ...]) -> None:
    position = 0
    for pattern in expected:
        for piece in pattern.split("*"):
            found = out.find(piece, position)
            assert found >= 0, f"not found after position {position}: {piece!r}\n{out}"
            position = found + len(piece)


def test_the_catalogue_is_complete() -> None:
    assert len(CASES) >= 12
    assert len({case.id for case in CASES}) == len(CASES)
