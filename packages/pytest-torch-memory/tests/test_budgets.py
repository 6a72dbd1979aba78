"""The torch_max_memory marker's arguments and failure message, with made-up peaks."""

from __future__ import annotations

import pytest

from pytest_torch.core.peaks import Block, PeakMemory
from pytest_torch.memory.budgets import MemoryBudget, budget_failure, parse_budget

MIB = 2**20


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((), {"mb": 512}, MemoryBudget(512.0)),
        ((64,), {}, MemoryBudget(64.0)),
        ((0.5,), {"device": "cuda"}, MemoryBudget(0.5, ("cuda",))),
        ((), {"mb": 1, "device": ["cuda", "cpu"]}, MemoryBudget(1.0, ("cpu", "cuda"))),
    ],
)
def test_parse_budget(args, kwargs, expected):
    assert parse_budget(args, kwargs, "t.py::test") == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs a positive budget in MiB, got None"),
        ((-5,), {}, "needs a positive budget in MiB, got -5"),
        ((), {"mb": "512"}, "needs a positive budget in MiB, got '512'"),
        ((True,), {}, "needs a positive budget in MiB, got True"),
        ((), {"mb": 5, "megabytes": 3}, "unknown keyword(s) megabytes; it takes mb= and device="),
        ((5, 6), {}, "takes mb once"),
        ((5,), {"mb": 6}, "takes mb once"),
        ((5,), {"device": "gpu"}, "unknown device type 'gpu'"),
        ((5,), {"device": 0}, "device= takes a device type"),
    ],
)
def test_bad_budgets_name_the_test_and_the_fix(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        parse_budget(args, kwargs, "t.py::test")
    assert str(info.value).startswith("t.py::test")
    assert message in str(info.value)


def test_budget_failure_says_budget_peak_device_start_and_added():
    peak = PeakMemory(
        "cpu",
        at_start=100 * MIB,
        peak=612 * MIB,
        at_end=110 * MIB,
        largest=(Block(256 * MIB, 3.25, None, True), Block(64 * MIB, 1.0, "tensor [4] f", False)),
    )
    message = budget_failure({"cpu": peak}, MemoryBudget(512), {})
    assert message is not None
    lines = message.splitlines()
    assert lines[0] == (
        "peak memory on cpu was 612.0 MiB, over the torch_max_memory budget of 512 MiB by"
        " 100.0 MiB (+19.5 %)"
    )
    assert "already allocated when the test body started: 100.0 MiB" in lines[1]
    assert lines[2].endswith("added by the test body at its peak:            512.0 MiB")
    assert "256.0 MiB  allocated 3.2 ms into the test body, freed before the body ended" in message
    assert "64.0 MiB  allocated 1.0 ms into the test body, still used by a tensor [4] f" in message
    assert message.endswith("raise the budget: @pytest.mark.torch_max_memory(mb=612)")


def test_budget_applies_only_to_its_devices():
    over = PeakMemory("cuda:1", 0, 600 * MIB, 0)
    assert budget_failure({"cuda:1": over}, MemoryBudget(512, ("cpu",)), {}) is None
    message = budget_failure({"cuda:1": over}, MemoryBudget(512, ("cuda",)), {"cpu": "why"})
    assert (
        message is not None and "on cuda:1" in message and "(not measured on cpu: why)" in message
    )


def test_at_the_budget_is_within_it():
    exact = PeakMemory("cpu", 0, 512 * MIB, 0)
    assert budget_failure({"cpu": exact}, MemoryBudget(512), {}) is None
