"""Hostile user code against the memory plugin: leaks hidden in default arguments,
closures, class attributes, tensor-keyed dicts, graph nodes and per-call buffers;
fixtures and bodies that fail; bad marker numbers; compiled models, sparse and nested
tensors alive during a census.

Each case runs a real pytest session and checks that the report tells the truth (what
accumulates, who holds it, what to do) and that a failure of the user's own survives
unchanged, with no traceback into the plugins and no warning of ours.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass

import pytest
import torch._dynamo

# in-process pytester runs drop the modules a run imported; torch.compile's machinery
# cannot be imported twice in one process, so it is imported here, once
torch._dynamo.list_backends()

PLUGIN_FRAME = re.compile(r"pytest_torch[/\\]\S+\.py:\d+: in ")
FORBIDDEN = ("INTERNALERROR", "Traceback (most recent call last)", "OverflowError")
NO_NUMBERS = re.compile(r"tensor\(\[")  # a tensor printed with its values


@dataclass
class Case:
    id: str
    source: str
    #: pytest's outcome counts (assert_outcomes keywords)
    outcomes: dict[str, int]
    #: every one of these lines (fnmatch patterns) must appear, in this order
    lines: tuple[str, ...] = ()
    #: none of these substrings may appear
    absent: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


# the cases build models, whose initialisation draws from the global generator
pytestmark = pytest.mark.usefixtures("torch_seed")

HEADER = "import pytest\nimport torch\n\n"

CASES = [
    Case(
        "default-argument",
        HEADER + "def remember(x, cache=[]):\n"
        "    cache.append(x * 2)\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    remember(torch.ones(3))\n",
        {"failed": 1},
        (
            "  5 tensors, 1 per run: shape [[]3[]], float32, cpu (+12 B per run)",
            "    created at test_case.py:5 in remember(): `cache.append(x * 2)`",
            "    held by list in default argument `cache` of function `remember`",
            "    plain tensors (no autograd graph) pile up there: clear or bound the container*",
        ),
    ),
    Case(
        "closure",
        HEADER + "def make():\n"
        "    seen = []\n"
        "    def note(x):\n"
        "        seen.append(x.clone())\n"
        "    return note\n\n"
        "note = make()\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    note(torch.ones(4))\n",
        {"failed": 1},
        ("    held by list `seen` captured by function `make.<locals>.note`",),
    ),
    Case(
        "class-attribute",
        HEADER + "class Registry:\n"
        "    seen = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    Registry.seen.append(torch.ones(2))\n",
        {"failed": 1},
        ("    held by list in attribute `seen` of class `Registry` in module `test_case`",),
    ),
    Case(
        "dict-keyed-by-tensors",
        HEADER + "scores = {}\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    scores[torch.arange(49.0).reshape(7, 7) + len(scores)] = torch.ones(3)\n",
        {"failed": 1},
        (
            "    held by keys of dict `scores` in module `test_case`",
            "    held by key `tensor [[]7, 7[]] float32` of dict `scores` in module `test_case`",
        ),
        absent=("tensor([[",),
    ),
    Case(
        "list-of-grad-fn",
        HEADER + "model = torch.nn.Linear(8, 4)\n"
        "nodes = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    nodes.append(model(torch.ones(5, 8)).relu().sum().grad_fn)\n",
        {"failed": 1},
        (
            "  autograd graph nodes held by Python after each run: 1 -> 2 -> 3 -> 4 (+1 per run*",
            "  4 autograd graph nodes SumBackward0 (grad_fn objects), 1 per run",
            "    held by list `nodes` in module `test_case`",
            "    you keep autograd graph nodes (grad_fn): keep the tensor's value with"
            " .detach() or drop the reference*",
        ),
        absent=("store tensor.detach()",),
    ),
    Case(
        "outputs-kept-per-step",
        HEADER + "model = torch.nn.Linear(8, 4)\n"
        "outputs = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    out = model(torch.ones(5, 8))\n"
        "    outputs.append({'logits': out, 'loss': out.sum()})\n",
        {"failed": 1},
        (
            "    held by key `logits` of a dict in list `outputs` in module `test_case`",
            "    an output structure is kept on every run: each run's outputs, in a dict*",
        ),
    ),
    Case(
        "buffer-registered-per-call",
        HEADER + "class Tracker(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        self.register_buffer(f'seen_{len(self._buffers)}', x.detach().clone())\n"
        "        return x\n\n"
        "tracker = Tracker()\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    tracker(torch.ones(6))\n",
        {"failed": 1},
        (
            "    held by buffer `seen_*` of a `Tracker` module (global `tracker`*",
            "    a new buffer is registered on every run: register it once*",
        ),
    ),
    Case(
        "fixture-fails",
        HEADER + "@pytest.fixture\n"
        "def data():\n"
        "    raise RuntimeError('the data set is missing')\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "@pytest.mark.torch_max_memory(mb=8)\n"
        "def test_it(data):\n"
        "    pass\n",
        {"errors": 1},
        ("E       RuntimeError: the data set is missing",),
        absent=("memory leak", "torch_max_memory budget"),
    ),
    Case(
        "body-fails-inside-a-leak-check",
        HEADER + "kept = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_it():\n"
        "    kept.append(torch.ones(2))\n"
        "    assert len(kept) < 3, f'only {len(kept)} batches fit'\n",
        {"failed": 1},
        (
            "E       AssertionError: only 3 batches fit",
            "E       assert 3 < 3",
        ),
        absent=("memory leak",),
    ),
    Case(
        "body-raises-under-a-budget",
        HEADER + "@pytest.mark.torch_max_memory(mb=1)\n"
        "def test_it():\n"
        "    torch.ones(1024, 1024)\n"
        "    raise KeyError('labels')\n",
        {"failed": 1},
        ("E       KeyError: 'labels'",),
        absent=("over the torch_max_memory budget",),
    ),
    Case(
        "nan-tolerance",
        HEADER + "@pytest.mark.torch_memory_leak(tolerance_bytes=float('nan'))\n"
        "def test_it():\n"
        "    pass\n",
        {"errors": 1},
        (
            "*test_case.py::test_it: @pytest.mark.torch_memory_leak tolerance_bytes: expected"
            " a number of bytes >= 0*got nan*",
        ),
    ),
    Case(
        "inf-tolerance",
        HEADER + "@pytest.mark.torch_memory_leak(tolerance_bytes=float('inf'))\n"
        "def test_it():\n"
        "    pass\n",
        {"errors": 1},
        ("*test_case.py::test_it: @pytest.mark.torch_memory_leak tolerance_bytes:*got inf*",),
    ),
    Case(
        "bool-iterations",
        HEADER + "@pytest.mark.torch_memory_leak(iterations=True)\ndef test_it():\n    pass\n",
        {"errors": 1},
        ("*test_case.py::test_it: @pytest.mark.torch_memory_leak iterations:*got True*bool*",),
    ),
    Case(
        "inf-budget",
        HEADER + "@pytest.mark.torch_max_memory(mb=float('inf'))\ndef test_inf():\n    pass\n",
        {"errors": 1},
        (
            "*test_case.py::test_inf: @pytest.mark.torch_max_memory needs a positive budget"
            " in MiB, got inf*",
        ),
    ),
    Case(
        "bool-budget",
        HEADER + "@pytest.mark.torch_max_memory(True)\ndef test_bool():\n    pass\n",
        {"errors": 1},
        (
            "*test_case.py::test_bool: @pytest.mark.torch_max_memory needs a positive budget"
            " in MiB, got True (a bool is not a size)*",
        ),
    ),
    Case(
        "compiled-model-leaves-fake-tensors",
        HEADER + "model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n"
        "compiled = torch.compile(model, backend='eager')\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_compiled_is_clean():\n"
        "    with torch.no_grad():\n"
        "        compiled(torch.ones(4, 8))\n\n"
        "kept = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_compiled_leaks():\n"
        "    kept.append(compiled(torch.ones(4, 8)).detach())\n",
        {"passed": 1, "failed": 1},
        (
            "  5 tensors, 1 per run: shape [[]4, 8[]], float32, cpu (+128 B per run)",
            "    held by list `kept` in module `test_case`",
        ),
        absent=("data pointer", "warnings summary", "FakeTensor"),
    ),
    Case(
        "sparse-and-nested-alive",
        HEADER + "import warnings\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])\n"
        "jagged = torch.nested.nested_tensor([torch.ones(2, 4), torch.ones(3, 4)],"
        " layout=torch.jagged)\n"
        "meta = torch.ones(1000, device='meta')\n"
        "sparse_kept = []\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_clean_among_them():\n"
        "    (nested.to_padded_tensor(0.0).sum() + jagged.values().sum()).item()\n\n"
        "@pytest.mark.torch_memory_leak(iterations=3)\n"
        "def test_sparse_leak():\n"
        "    sparse_kept.append(torch.eye(3).to_sparse())\n",
        {"passed": 1, "failed": 1},
        (
            "  5 tensors, 1 per run: shape [[]3, 3[]], float32, cpu, sparse_coo*",
            "    held by list `sparse_kept` in module `test_case`",
        ),
        absent=("warnings summary",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_code_gets_a_true_report(pytester: pytest.Pytester, case: Case) -> None:
    pytester.makepyfile(test_case=case.source)
    try:
        result = pytester.runpytest("-p", "torch_memory", "-p", "no:randomly", *case.args)
    finally:
        # compiled code keeps the case's models (and tensors) alive: later tests in this
        # process measure live tensors, so nothing of this case may stay behind
        torch._dynamo.reset()
        gc.collect()
    output = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(**case.outcomes)
    if case.lines:
        result.stdout.fnmatch_lines(list(case.lines))
    for text in (*case.absent, *FORBIDDEN):
        assert text not in output, f"{text!r} in the output:\n{output}"
    assert not PLUGIN_FRAME.search(output), f"a plugin frame in the output:\n{output}"
    for line in output.splitlines():
        if line.startswith("    held by "):  # our report: a tensor is named, never printed
            assert not NO_NUMBERS.search(line), line


def test_a_users_failure_reads_the_same_with_and_without_a_leak_check(
    pytester: pytest.Pytester,
) -> None:
    body = (
        "def test_it():\n"
        "    batch = torch.ones(2, 3)\n"
        "    assert batch.shape == (3, 2), 'the batch is transposed'\n"
    )
    pytester.makepyfile(
        test_plain=HEADER + body,
        test_marked=HEADER + "@pytest.mark.torch_memory_leak(iterations=3)\n" + body,
    )

    def error_lines(name: str) -> list[str]:
        result = pytester.runpytest("-p", "torch_memory", "-p", "no:randomly", name)
        result.assert_outcomes(failed=1)
        return [line for line in result.stdout.lines if line.startswith("E ")]

    plain = error_lines("test_plain.py")
    assert plain and plain == error_lines("test_marked.py")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--torch-leak-tolerance-bytes=inf", "expected a number of bytes >= 0"),
        ("--torch-leak-tolerance-bytes=nan", "expected a number of bytes >= 0"),
        ("--torch-leak-tolerance-bytes=" + "9" * 400, "at most 8 EiB"),
        ("--torch-leak-iterations=True", "expected a whole number from 2 to 1000, got 'True'"),
        ("--torch-leak-iterations=100000", "expected a whole number from 2 to 1000"),
        ("--torch-leak-tolerance-tensors=inf", "expected a whole number >= 0, got 'inf'"),
        ("--torch-memory-top=nan", "expected a whole number >= 0, got 'nan'"),
    ],
)
def test_hostile_option_values_are_usage_errors(
    pytester: pytest.Pytester, option: str, message: str
) -> None:
    pytester.makepyfile(test_case="def test_it():\n    pass\n")
    result = pytester.runpytest("-p", "torch_memory", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str()
