"""Unit tests of host-device sync detection (CPU: the operations that would sync)."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from pytest_torch.perf import assert_no_host_sync, find_host_syncs
from pytest_torch.perf.syncs import SYNC_OPERATIONS

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
    listed = y.cpu().tolist()
    moved = y.to("cpu")
    where = torch.where(y > 0)
    array = y.numpy()
    sel = torch.masked_select(y, y > 0)
    nz = y.nonzero()
    same = torch.equal(y, y)
    rep = torch.repeat_interleave(y, torch.ones(8, dtype=torch.long))
    counts = torch.bincount(torch.ones(3, dtype=torch.long))
    return n, f, picked, top, values, listed, moved, where, array, sel, nz, same, rep, counts


EXPECTED = [
    ("bool", "if y.sum() > 0:"),
    ("int", "n = int(y[0])"),
    ("float", "f = float(y[1])"),
    ("boolean mask indexing", "picked = y[y > 1]"),
    ("item", "top = y.max().item()"),
    ("unique", "values = torch.unique(y)"),
    ("cpu", "listed = y.cpu().tolist()"),
    ("tolist", "listed = y.cpu().tolist()"),
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
    assert "allow=(" in message


def test_clean_code_passes_and_returns_its_result():
    x = torch.randn(4, 4)
    out = assert_no_host_sync(lambda a, b=1: torch.where(a > 0, a, b) @ a, x, b=2)
    assert torch.equal(out, torch.where(x > 0, x, 2) @ x)
    assert assert_no_host_sync(torch.nn.Linear(4, 2), x).shape == (4, 2)


def test_dtype_and_accelerator_moves_are_not_syncs():
    x = torch.randn(4)
    assert_no_host_sync(lambda: (x.to(torch.float64), x.to(dtype=torch.float16), x.float()))


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_syncs_are_found_and_the_debug_mode_is_restored():
    x = torch.randn(1024, device="cuda")
    before = torch.cuda.get_sync_debug_mode()
    with pytest.raises(AssertionError) as info:
        assert_no_host_sync(lambda: (x.sum().item(), x[x > 0], x.cpu()))
    message = str(info.value)
    assert "item [cuda]" in message and "boolean mask indexing [cuda]" in message
    assert "cpu [cuda]" in message
    assert torch.cuda.get_sync_debug_mode() == before
    assert_no_host_sync(lambda: torch.where(x > 0, x, 0).sum())
