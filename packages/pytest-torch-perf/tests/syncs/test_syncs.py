"""Unit tests of host-device sync detection (CPU: the operations that would sync): what is
found and where, allow=, and the check's own machinery put back."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from pytest_torch.perf import assert_no_host_sync, find_host_syncs
from pytest_torch.perf.syncs.rules import SYNC_OPERATIONS

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def everything(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    n = int(y[0])
    f = float(y[1])
    picked = y[y > 1]
    top = y.max().item()
    values = torch.unique(y)
    copied = y.cpu().tolist()  # one copy; the list is read from the host copy
    listed = y.tolist()
    moved = y.to("cpu")
    where = torch.where(y > 0)
    array = y.numpy()
    sel = torch.masked_select(y, y > 0)
    nz = y.nonzero()
    same = torch.equal(y, y)
    rep = torch.repeat_interleave(y, torch.ones_like(y, dtype=torch.long))
    counts = torch.bincount((y > 0).long())
    return (
        n,
        f,
        picked,
        top,
        values,
        copied,
        listed,
        moved,
        where,
        array,
        sel,
        nz,
        same,
        rep,
        counts,
    )


EXPECTED = [
    ("bool", "if y.sum() > 0:"),
    ("int", "n = int(y[0])"),
    ("float", "f = float(y[1])"),
    ("boolean mask indexing", "picked = y[y > 1]"),
    ("item", "top = y.max().item()"),
    ("unique", "values = torch.unique(y)"),
    ("cpu", "copied = y.cpu().tolist()"),
    ("tolist", "listed = y.tolist()"),
    ("to(cpu)", 'moved = y.to("cpu")'),
    ("where(cond)", "where = torch.where(y > 0)"),
    ("numpy", "array = y.numpy()"),
    ("masked_select", "sel = torch.masked_select(y, y > 0)"),
    ("nonzero", "nz = y.nonzero()"),
    ("equal", "same = torch.equal(y, y)"),
    ("repeat_interleave", "rep = torch.repeat_interleave"),
    ("bincount", "counts = torch.bincount"),
]


def test_every_synchronising_operation_is_found_with_its_line():
    _, events = find_host_syncs(everything, torch.randn(8))
    found = [(e.operation, e.lineno) for e in events]
    expected = [(op, line_of(everything, text)) for op, text in EXPECTED]
    assert found == expected
    assert all(e.filename == __file__ for e in events)
    assert all(e.device == "cpu" for e in events)


def test_failure_lists_every_event_and_says_cpu_would_sync():
    with pytest.raises(AssertionError) as info:
        assert_no_host_sync(everything, torch.randn(8))
    message = str(info.value)
    assert message.startswith(f"expected no host-device synchronisation, found {len(EXPECTED)}")
    assert (
        f"item [cpu] at {os.path.relpath(__file__)}:{line_of(everything, '.item()')}  top = y.max().item()"
        in message
    )
    assert "on a GPU each would make the host wait for the device" in message
    assert "To accept a known one: allow=(" in message
    assert "      on a GPU: the value is copied to the host" in message
    assert "      instead: keep the value on the device" in message


def test_clean_code_passes_and_returns_its_result():
    x = torch.randn(4, 4)
    out = assert_no_host_sync(lambda a, b=1: torch.where(a > 0, a, b) @ a, x, b=2)
    assert torch.equal(out, torch.where(x > 0, x, 2) @ x)
    assert assert_no_host_sync(torch.nn.Linear(4, 2), x).shape == (4, 2)


def test_dtype_and_accelerator_moves_are_not_syncs():
    x = torch.randn(4)
    assert_no_host_sync(lambda: (x.to(torch.float64), x.to(dtype=torch.float16), x.float()))


def test_a_non_blocking_copy_to_the_host_is_queued_not_a_sync(monkeypatch):
    from pytest_torch.perf.syncs import dispatch

    logits = torch.randn(4, 10)

    def copied(non_blocking):  # a host buffer made here: one made before looks like an input
        return torch.empty(4, dtype=torch.long).copy_(logits.argmax(-1), non_blocking=non_blocking)

    assert_no_host_sync(lambda: logits.argmax(-1).to("cpu", non_blocking=True))
    assert_no_host_sync(lambda: copied(True))
    _, events = find_host_syncs(lambda: copied(False))
    assert [e.operation for e in events] == ["to(cpu)"]
    # a blocking copy is one; so is a non-blocking one into pageable memory, which the
    # host waits for (a CPU run takes host buffers to be pinned: none can be without CUDA)
    with pytest.raises(AssertionError) as info:
        assert_no_host_sync(lambda: logits.argmax(-1).to("cpu"))
    assert "found 1" in str(info.value) and "to(cpu) [cpu]" in str(info.value)
    assert ".to('cpu', non_blocking=True) (torch puts the copy in pinned memory)" in str(info.value)
    monkeypatch.setattr(dispatch, "_pinned", lambda tensor: False)
    _, events = find_host_syncs(lambda: copied(True))
    assert [e.operation for e in events] == ["to(cpu)"]


def test_allow_accepts_known_syncs_by_name():
    x = torch.randn(4)
    assert assert_no_host_sync(lambda: x.sum().item(), allow=["item"]) == pytest.approx(
        float(x.sum())
    )
    assert_no_host_sync(lambda: bool(x.any()), allow="bool")
    with pytest.raises(AssertionError, match="nonzero"):
        assert_no_host_sync(lambda: (x.sum().item(), x.nonzero()), allow=["item"])


def test_unknown_allow_name_is_explained():
    with pytest.raises(ValueError, match=r"unknown operation\(s\) in allow=: \['itme'\]"):
        assert_no_host_sync(lambda: None, allow=["itme"])
    assert "item" in SYNC_OPERATIONS


def test_one_user_line_is_reported_once():
    x = torch.randn(4)
    _, events = find_host_syncs(lambda: x.sum().item())
    assert [e.operation for e in events] == ["item"]  # not also the aten op below it


def test_syncs_inside_library_code_point_at_the_caller():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))

    def forward(x):
        return model(x).argmax().item()

    _, events = find_host_syncs(forward, torch.randn(2, 4))
    assert [(e.operation, e.lineno) for e in events] == [("item", line_of(forward, ".item()"))]


def test_modes_are_removed_afterwards_even_when_the_function_raises():
    def broken():
        torch.ones(1).item()
        raise KeyError("boom")

    with pytest.raises(KeyError):
        find_host_syncs(broken)
    assert _get_current_function_mode_stack() == []
    assert _get_current_dispatch_mode_stack() == []


@pytest.mark.cuda(reason="the host-sync check arms CUDA's own sync debug mode")
def test_cuda_syncs_are_found_and_the_debug_mode_is_restored():
    x = torch.linspace(-1, 1, 1024, device="cuda")  # no RNG: the state guard stays quiet
    before = torch.cuda.get_sync_debug_mode()
    with pytest.raises(AssertionError) as info:
        assert_no_host_sync(lambda: (x.sum().item(), x[x > 0], x.cpu()))
    message = str(info.value)
    assert "item [cuda]" in message and "boolean mask indexing [cuda]" in message
    assert "cpu [cuda]" in message
    assert torch.cuda.get_sync_debug_mode() == before
    assert_no_host_sync(lambda: torch.where(x > 0, x, 0).sum())
    # the backend's own report merges into the entry found: allow= silences both
    _, events = find_host_syncs(lambda: x.sum().item())
    assert [(e.operation, e.device, e.confirmed) for e in events] == [("item", "cuda", True)]
    assert_no_host_sync(lambda: x.sum().item(), allow="item")


@pytest.mark.accelerator
def test_syncs_on_any_accelerator_are_found_by_the_check_itself(accelerator):
    """Without CUDA's sync debug mode the dispatch-level check still names each sync on
    the device's tensors (unconfirmed: no backend report to merge), and passes
    sync-free code."""
    x = torch.linspace(-1, 1, 1024, device=accelerator)  # no RNG: the guard stays quiet
    with pytest.raises(AssertionError) as info:
        assert_no_host_sync(lambda: (x.sum().item(), x[x > 0], x.cpu()))
    message = str(info.value)
    for operation in ("item", "boolean mask indexing", "cpu"):
        assert f"{operation} [{accelerator}]" in message, message
    assert_no_host_sync(lambda: torch.where(x > 0, x, 0).sum())
    _, events = find_host_syncs(lambda: x.sum().item())
    assert [(e.operation, e.device) for e in events] == [("item", accelerator)]
    assert_no_host_sync(lambda: x.sum().item(), allow="item")


def test_repeats_at_one_place_are_one_entry_with_a_count():
    x = torch.randn(4)
    _, events = find_host_syncs(lambda: [x[i].item() for i in range(4)])
    assert [(e.operation, e.count) for e in events] == [("item", 4)]
    with pytest.raises(
        AssertionError, match=r"found 4 synchronising operations:\n  item \[cpu\] at .* \(x4\)"
    ):
        assert_no_host_sync(lambda: [x[i].item() for i in range(4)])


def test_where_the_call_expression_is_unknown_the_line_is_used(monkeypatch):
    from pytest_torch.perf.syncs import sites

    monkeypatch.setattr(sites, "expression", lambda frame: "")
    a = torch.eye(2) + torch.rand(2, 2) * 0.1

    def code():
        return torch.linalg.inv(a)  # the line's only call

    _, events = find_host_syncs(code)
    assert [e.title() for e in events] == ["torch.linalg.inv → linalg check"]


def test_wrappers_are_restored_and_other_threads_are_not_recorded():
    import threading

    originals = (
        torch.Tensor.item,
        torch.Tensor.to,
        torch.tensor,
        torch.zeros,
        torch.Tensor.__repr__,
    )
    x = torch.randn(3)
    other: list = []

    def from_another_thread():
        thread = threading.Thread(target=lambda: other.append(x.sum().item()))
        thread.start()
        thread.join()

    _, events = find_host_syncs(from_another_thread)
    assert events == [] and len(other) == 1
    with pytest.raises(KeyError):
        find_host_syncs(lambda: (x.sum().item(), {}["boom"]))
    assert (
        torch.Tensor.item,
        torch.Tensor.to,
        torch.tensor,
        torch.zeros,
        torch.Tensor.__repr__,
    ) == originals
    assert "item" not in vars(torch.Tensor)
    _, outer = find_host_syncs(lambda: (find_host_syncs(lambda: x.sum().item()), bool(x.sum())))
    assert [e.operation for e in outer] == ["bool"]
    assert "item" not in vars(torch.Tensor)


@pytest.fixture
def warning_op():
    """An op whose kernel warns like torch.cuda.set_sync_debug_mode("warn")."""
    import warnings

    if not hasattr(torch.ops.pytest_torch_tests, "warns"):  # once per process

        @torch.library.custom_op("pytest_torch_tests::warns", mutates_args=())
        def warns(x: torch.Tensor) -> torch.Tensor:
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)
            return x.clone()

    return torch.ops.pytest_torch_tests.warns


def test_the_cuda_backends_warnings_merge_with_what_was_found(warning_op, monkeypatch):
    from pytest_torch.perf.syncs import dispatch, wrappers

    x = torch.randn(3)

    def code():
        return warning_op(x)

    _, events = find_host_syncs(code)
    assert [(e.title(), e.lineno, e.confirmed) for e in events] == [
        ("warning_op → cuda sync", line_of(code, "warning_op(x)"), True)
    ]
    assert_no_host_sync(code, allow="cuda sync")

    # an op already judged as a sync: one entry, confirmed, silenced by its own name
    real = dispatch.aten_sync
    monkeypatch.setattr(
        dispatch, "aten_sync", lambda name, *rest: "item" if name == "warns" else real(name, *rest)
    )
    _, events = find_host_syncs(code)
    assert [(e.operation, e.confirmed) for e in events] == [("item", True)]
    assert_no_host_sync(code, allow=["item"])

    # a read watched in Python (.item(), .cpu()...) whose op below it warns: one entry
    monkeypatch.setattr(dispatch, "aten_sync", real)
    item = wrappers._read("item", lambda tensor: warning_op(tensor))
    _, events = find_host_syncs(lambda: item(x))
    assert [(e.operation, e.confirmed) for e in events] == [("item", True)]


def test_allow_of_the_wrong_type_is_explained():
    with pytest.raises(
        TypeError, match=r"allow= takes operation names, got 3; expected names from: item, bool"
    ):
        assert_no_host_sync(lambda: None, allow=["item", 3])
    with pytest.raises(TypeError, match="got int"):
        assert_no_host_sync(lambda: None, allow=5)
