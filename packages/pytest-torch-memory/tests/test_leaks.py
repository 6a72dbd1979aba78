"""The leak engine on real training code: leaks found and named, usual suspects passed."""

from __future__ import annotations

import gc
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from pytest_torch.memory.api import assert_max_memory, assert_no_memory_leak
from pytest_torch.memory.census import Census, GroupKey, take_census
from pytest_torch.memory.leak_parameters import LeakCheck, parse_bytes, parse_leak_check
from pytest_torch.memory.leaks import check_for_leaks, culprits, judge

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

CHECK = LeakCheck(iterations=5)
history: list = []

#: this module as the messages name it (see test_culprits.py: whole run from the sdist)
MODULE = (
    __name__ if all(p.isidentifier() for p in __name__.split(".")) else __name__.rpartition(".")[2]
)


@pytest.fixture(autouse=True)
def _fresh_history():
    history.clear()
    yield
    history.clear()
    assert gc.get_freeze_count() == 0  # the frozen heap is always thawed


def _model_and_data():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, torch.randn(32, 8), torch.randn(32, 1)


def test_accumulated_losses_are_named_with_line_holder_and_hint():
    model, x, y = _model_and_data()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        history.append(loss)

    message = check_for_leaks(step, CHECK)
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == "memory leak: each of the 5 runs after the warm-up left more behind."
    # the grads made in the warm-up are there from the start: only the losses add up
    assert re.search(
        r"live tensors after each run: (\d+) -> .* \(\+1 per run; tolerance 0\)", message
    )
    assert "  7 tensors, 1 per run: shape [], float32, cpu, grad_fn=MseLossBackward0" in message
    assert "test_leaks.py:" in message and "`loss = F.mse_loss(model(x), y)`" in message
    assert f"held by list `history` in module `{MODULE}`" in message
    assert "store loss.item() (a Python float) instead of loss" in message


def test_activations_kept_by_a_hook_are_named():
    model, x, _ = _model_and_data()
    kept = []
    handle = model[1].register_forward_hook(lambda module, args, output: kept.append(output))
    try:
        message = check_for_leaks(lambda: model(x), CHECK)
    finally:
        handle.remove()
    assert message is not None
    assert "1 per run: shape [32, 16], float32, cpu, grad_fn=ReluBackward0" in message
    assert "held by list `kept` captured by function" in message
    assert "store tensor.detach() instead of the tensor" in message


def test_a_buffer_that_grows_without_new_tensors_is_a_leak_in_bytes():
    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(0))

        def forward(self, x):
            self.seen = torch.cat([self.seen, x.flatten()])
            return x

    recorder = Recorder()
    message = check_for_leaks(lambda: recorder(torch.ones(256)), CHECK)
    assert message is not None
    assert "live tensors after each run" not in message  # the count does not grow
    assert "bytes allocated on cpu after each run: 1.0 KiB -> 2.0 KiB -> 3.0 KiB" in message
    assert "(+1.0 KiB per run; tolerance 0 B)" in message
    assert "1 tensor: shape [1792], float32, cpu, 7.0 KiB in all" in message
    assert "`self.seen = torch.cat([self.seen, x.flatten()])`" in message
    assert "held by buffer `seen` of a `Recorder` module" in message


def test_an_adam_training_loop_with_a_scheduler_does_not_leak():
    model, x, y = _model_and_data()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)  # state created lazily
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        history.append(loss.item())

    assert check_for_leaks(step, CHECK) is None


def test_a_compiled_model_does_not_leak():
    model, x, _ = _model_and_data()
    compiled = torch.compile(model, backend="eager")

    def step():
        with torch.no_grad():
            compiled(x)

    assert check_for_leaks(step, CHECK) is None


def test_one_time_initialisation_and_python_caches_are_not_leaks():
    cache: dict[int, str] = {}
    lazy: dict[str, torch.Tensor] = {}

    def step():
        if "table" not in lazy:  # first run only
            lazy["table"] = torch.randn(1000)
        cache[len(cache)] = str(len(cache)) * 10  # grows every run, but holds no tensor
        return (lazy["table"] * 2).sum()

    assert check_for_leaks(step, CHECK) is None


def test_growth_in_some_runs_only_is_not_a_leak():
    runs = []

    def step():
        runs.append(None)
        if len(runs) % 2:
            history.append(torch.ones(1))

    assert check_for_leaks(step, CHECK) is None


def test_tolerance_allows_steady_growth_up_to_it():
    def step():
        history.append(torch.ones(4))

    assert check_for_leaks(step, LeakCheck(3, tolerance_tensors=1, tolerance_bytes=64)) is None
    message = check_for_leaks(step, LeakCheck(3, tolerance_tensors=1, tolerance_bytes=0))
    assert message is not None
    assert "bytes allocated on cpu" in message and "live tensors after each run" not in message


def test_a_body_that_does_not_leak_runs_twice_and_one_that_leaks_every_time():
    calls = []
    assert check_for_leaks(lambda: calls.append(1), LeakCheck(3)) is None
    assert len(calls) == 2  # the warm-up, and one run that left nothing more behind

    calls.clear()
    kept = []

    def leaking():
        calls.append(1)
        kept.append(torch.zeros(4))

    message = check_for_leaks(leaking, LeakCheck(3))
    assert len(calls) == 1 + 3 + 1  # warm-up, the 3 runs, and the traced run
    # the holder is found among the body's captured variables (cells compare by their
    # contents: the list of ints beside it must not be compared with the tensors)
    assert message is not None and "held by list `kept` captured by function" in message


def test_growth_that_stops_ends_the_check_at_the_first_run_without_growth():
    calls, kept = [], []

    def grows_twice():  # say, a cache that fills up after three calls
        calls.append(1)
        if len(calls) <= 3:
            kept.append(torch.zeros(4))

    assert check_for_leaks(grows_twice, LeakCheck(5)) is None
    assert len(calls) == 4  # runs 1 and 2 grew, run 3 did not: no later run can make a leak


def test_errors_from_the_body_propagate():
    calls, kept = [], []

    def failing():
        calls.append(1)
        kept.append(torch.zeros(1))  # it grows, so the runs go on
        if len(calls) > 2:
            raise RuntimeError("third run")

    with pytest.raises(RuntimeError, match="third run"):
        check_for_leaks(failing, LeakCheck(3))


def _census(counts: dict[GroupKey, int], sizes: dict[str, int]) -> Census:
    return Census(counts, {key: 4 * n for key, n in counts.items()}, sizes)


def test_judge_and_culprits_on_made_up_censuses():
    loss = GroupKey((), "float32", "cpu", True, "MseLossBackward0")
    other = GroupKey((3,), "int64", "cpu", False, None)
    censuses = [_census({loss: n, other: 2}, {"cpu": 100 + n, "cuda:0": 7}) for n in range(4)]
    verdict = judge(censuses, LeakCheck(3))
    assert verdict.tensors and verdict.devices == ["cpu"]
    (found,) = culprits(censuses, verdict.devices)
    assert found.key == loss and found.per_run == 1 and found.bytes_per_run == 4
    assert not judge(censuses, LeakCheck(3, tolerance_tensors=1, tolerance_bytes=1)).leaking


def test_parse_bytes_and_leak_markers():
    assert [parse_bytes(v, "w") for v in (0, 4096, "64KiB", "1.5 MB", "2mib", "10 b")] == [
        0,
        4096,
        65536,
        1_500_000,
        2 * 2**20,
        10,
    ]
    for bad in (-1, "lots", "5 parsecs", True):
        with pytest.raises(ValueError, match="w: expected a number of bytes"):
            parse_bytes(bad, "w")
    defaults = LeakCheck(4, 1, 2)
    assert parse_leak_check((), {}, "t", defaults) == defaults
    assert parse_leak_check((7,), {"tolerance_bytes": "1KiB"}, "t", defaults) == (7, 1, 1024)
    with pytest.raises(ValueError, match=r"iterations: expected a whole number from 2 to 1000"):
        parse_leak_check((1,), {}, "t", defaults)
    with pytest.raises(ValueError, match="unknown keyword"):
        parse_leak_check((), {"runs": 3}, "t", defaults)
    with pytest.raises(ValueError, match="tolerance_tensors: expected a whole number >= 0 "):
        parse_leak_check((), {"tolerance_tensors": -1}, "t", defaults)


graph_nodes: list = []


def test_kept_grad_fn_nodes_get_their_own_advice():
    model = torch.nn.Linear(8, 4)

    def step():
        graph_nodes.append(model(torch.ones(5, 8)).relu().sum().grad_fn)

    try:
        message = check_for_leaks(step, LeakCheck(3))
    finally:
        graph_nodes.clear()
    assert message is not None
    assert "autograd graph nodes held by Python after each run: 1 -> 2 -> 3 -> 4" in message
    assert "4 autograd graph nodes SumBackward0 (grad_fn objects), 1 per run" in message
    assert f"held by list `graph_nodes` in module `{MODULE}`" in message
    assert (
        "you keep autograd graph nodes (grad_fn): keep the tensor's value with .detach()"
        " or drop the reference" in message
    )
    assert "store tensor.detach()" not in message


def test_plain_tensors_and_output_structures_get_fitting_advice():
    model = torch.nn.Linear(4, 2)

    def keep_plain():
        history.append(torch.ones(3))

    message = check_for_leaks(keep_plain, LeakCheck(3))
    assert message is not None
    assert (
        "plain tensors (no autograd graph) pile up there: clear or bound the container" in message
    )
    assert "autograd graph" not in message.split("plain tensors")[0]
    history.clear()

    def keep_outputs():
        out = model(torch.ones(2, 4))
        history.append({"logits": out, "loss": out.sum()})

    message = check_for_leaks(keep_outputs, LeakCheck(3))
    assert message is not None
    assert f"held by key `logits` of a dict in list `history` in module `{MODULE}`" in message
    assert "an output structure is kept on every run: each run's outputs, in a dict" in message


def _silent_census():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        census = take_census()
    assert [str(w.message) for w in caught] == []
    return census


def test_fake_functional_and_meta_tensors_are_skipped_without_warnings():
    from torch._subclasses.fake_tensor import FakeTensorMode

    before = _silent_census()
    with FakeTensorMode():
        fakes = [torch.ones(64, 64) for _ in range(3)]
    metas = [torch.ones(1024, device="meta") for _ in range(2)]
    after = _silent_census()
    assert after.counts == before.counts  # neither fake nor meta tensors own memory
    assert after.device_bytes == before.device_bytes
    del fakes, metas

    def compile_and_keep():  # compiled code leaves fake tensors behind: not a leak
        compiled = torch.compile(torch.nn.Linear(3, 3), backend="eager")
        with torch.no_grad():
            compiled(torch.ones(2, 3))
        torch._dynamo.reset()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_for_leaks(compile_and_keep, LeakCheck(2))
    assert [str(w.message) for w in caught if "data pointer" in str(w.message)] == []


def test_sparse_and_nested_tensors_are_counted_by_what_they_are():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own "nested tensors are a prototype"
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    sparse = torch.ones(4).to_sparse()
    census = _silent_census()
    assert census.counts.get(GroupKey((2,), "float32", "cpu", False, None, "nested")) == 1
    key = GroupKey((4,), "float32", "cpu", False, None, "sparse_coo")
    assert census.counts.get(key) == 1
    assert key.describe() == "shape [4], float32, cpu, sparse_coo"
    assert GroupKey((2,), "float32", "cpu", False, None, "nested").describe() == (
        "2 nested tensors, float32, cpu"
    )
    del nested, sparse


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"iterations": 0}, ValueError, "iterations: expected a whole number from 2 to 1000"),
        ({"iterations": 10**6}, ValueError, "a leak), got 1000000"),
        ({"iterations": True}, TypeError, "got True (a bool is not a count)"),
        ({"iterations": 3.0}, TypeError, "got 3.0"),
        ({"iterations": float("nan")}, TypeError, "NaN and infinities are not counts"),
        ({"tolerance_tensors": -1}, ValueError, "tolerance_tensors: expected a whole number >= 0"),
        ({"tolerance_tensors": False}, TypeError, "a bool is not a count"),
        ({"tolerance_bytes": float("inf")}, ValueError, "(finite, at most 8 EiB), got inf"),
        ({"tolerance_bytes": float("nan")}, ValueError, "got nan"),
        ({"tolerance_bytes": -1}, ValueError, "expected a number of bytes >= 0"),
        ({"tolerance_bytes": True}, TypeError, "expected a number of bytes >= 0"),
        ({"tolerance_bytes": "9" * 400}, ValueError, "at most 8 EiB"),
        ({"tolerance_bytes": [1]}, TypeError, "got [1]"),
    ],
)
def test_bad_leak_settings_are_clear_errors(kwargs, error, message):
    with pytest.raises(error) as info:
        parse_leak_check((), kwargs, "t.py::test", LeakCheck())
    assert str(info.value).startswith("t.py::test: @pytest.mark.torch_memory_leak ")
    assert message in str(info.value)
    assert "Example: @pytest.mark.torch_memory_leak(" in str(info.value)
    # the function says the same, in its own name
    with pytest.raises(error) as info:
        assert_no_memory_leak(lambda: None, **kwargs)
    assert str(info.value).startswith("assert_no_memory_leak ")
    assert message in str(info.value)
    assert "marker" not in str(info.value) and "pytest.mark" not in str(info.value)


@pytest.mark.parametrize(
    ("mb", "error"),
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (-1, ValueError),
        (0, ValueError),
        (2.0**60, ValueError),
        (True, TypeError),
        ("64", TypeError),
    ],
)
def test_bad_budgets_for_the_function_are_clear_errors(mb, error):
    with pytest.raises(
        error, match=r"assert_max_memory needs a positive budget in MiB, got "
    ) as info:
        assert_max_memory(lambda: None, mb=mb)
    assert "pytest.mark" not in str(info.value)
    assert "Example: assert_max_memory(step, mb=512" in str(info.value)


def test_assert_max_memory_does_not_count_garbage_left_by_earlier_code():
    import gc

    class Node:
        pass

    gc.disable()
    try:
        node = Node()
        node.itself = node
        node.tensor = torch.zeros(32 * 2**20, dtype=torch.uint8)
        del node
        peaks = assert_max_memory(
            lambda: torch.ones(2 * 2**20, dtype=torch.uint8), mb=8, device="cpu"
        )
    finally:
        gc.enable()
    assert peaks["cpu"].peak - peaks["cpu"].at_start == 2 * 2**20


def test_every_run_starts_from_the_random_state_of_the_first():
    import random

    drawn = []

    def step():  # keeps what it draws, so it leaks and every run is made
        drawn.append((torch.rand(()).item(), random.random(), torch.zeros(1)))

    torch.manual_seed(3)
    random.seed(3)
    assert check_for_leaks(step, LeakCheck(iterations=3)) is not None
    after_check = (torch.rand(()).item(), random.random())
    drawn = [values[:2] for values in drawn]
    assert len(drawn) == 5 and len(set(drawn)) == 1  # 1 + 3 runs and the traced one
    # the same draws as one run, and the generators left as one run leaves them
    torch.manual_seed(3)
    random.seed(3)
    assert (torch.rand(()).item(), random.random()) == drawn[0]
    assert (torch.rand(()).item(), random.random()) == after_check


_views: list[torch.Tensor] = []


def test_a_kept_view_leads_to_the_container_that_keeps_it_and_its_base():
    def step():  # a library that returns output.view(...), and a test that keeps it
        output = torch.zeros(2, 4) + 1
        _views.append(output.view(2, 4))

    message = check_for_leaks(step, LeakCheck(3))
    _views.clear()
    assert message is not None
    assert "2 per run: shape [2, 4]" in message  # the view and its base
    assert "held by list `_views` in module" in message
