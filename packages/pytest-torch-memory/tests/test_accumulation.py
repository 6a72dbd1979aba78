"""What a leak report says accumulates: each pattern of real code (a cache keyed by a
changing length, views kept of bigger tensors, growth torch keeps in C++) named as what
it is, with a holder and advice that fit."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from pytest_torch.memory.accumulation import Culprit, culprits
from pytest_torch.memory.census import Census, GroupKey
from pytest_torch.memory.leak_parameters import LeakCheck
from pytest_torch.memory.leak_report import Evidence, report
from pytest_torch.memory.leaks import Verdict, check_for_leaks, examine

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

#: this module as the messages name it (see test_culprits.py: whole run from the sdist)
MODULE = (
    __name__ if all(p.isidentifier() for p in __name__.split(".")) else __name__.rpartition(".")[2]
)


class RotaryTables:
    """A class-level cache of position tables keyed by sequence length, as rotary
    embeddings keep them: a new length adds a table and keeps every earlier one."""

    cache: dict[int, torch.Tensor] = {}  # noqa: RUF012 (the leak under test)

    def table(self, length: int) -> torch.Tensor:
        if length not in self.cache:
            self.cache[length] = torch.arange(length, dtype=torch.float32)
        return self.cache[length]


def test_a_cache_keyed_by_a_changing_length_keeps_one_more_tensor_per_run():
    lengths = iter(range(32, 400, 8))

    def step():
        RotaryTables().table(next(lengths))

    message = check_for_leaks(step, LeakCheck(4))
    RotaryTables.cache.clear()
    assert message is not None
    # the census grows by one tensor a run, and the report says so (not "replaced")
    # (the groups count the tensors after one more run, traced to find their lines)
    assert (
        "live tensors after each run: 1 -> 2 -> 3 -> 4 -> 5 (+1 per run; tolerance 0),"
        " 6 after one more, traced run" in message
    )
    assert "6 tensors, 1 per run, in a new shape each run ([40], [48], [56], ..., [72]):" in message
    assert "made new by the last run" not in message
    assert "held by key `72` of a dict in attribute `cache` of class `RotaryTables`" in message
    assert "a dict gets a new key on every run and keeps every earlier entry" in message


def test_a_buffer_replaced_by_a_bigger_one_is_still_told_as_replaced():
    held = {"buffer": torch.zeros(1)}

    def step():
        held["buffer"] = torch.zeros(held["buffer"].numel() + 64)

    message = check_for_leaks(step, LeakCheck(3))
    assert message is not None
    assert "made new by the last run (each run replaces it with a bigger one)" in message
    assert "in a new shape each run" not in message


_kept: list[torch.Tensor] = []


def _blur(image: torch.Tensor) -> torch.Tensor:
    # kornia's filters end with output.view(...): the caller gets a view
    out = F.avg_pool2d(image, 3, stride=1, padding=1)
    return out.view(image.shape[0], 1, 16, 16)


def test_the_bases_of_kept_views_are_held_by_those_views():
    def step():
        _kept.append(_blur(torch.ones(6, 1, 16, 16))[:, 0])

    message = check_for_leaks(step, LeakCheck(3))
    _kept.clear()
    assert message is not None
    lines = message.splitlines()
    base = next(i for i, line in enumerate(lines) if "shape [6, 1, 16, 16]" in line)
    assert "(+6.0 KiB per run)" in lines[base]
    assert lines[base + 1].startswith("    created at ") and "F.avg_pool2d" in lines[base + 1]
    assert lines[base + 2] == (
        "    held by their views (shape [6, 16, 16], float32, cpu), which list `_kept` in module"
        f" `{MODULE}` holds"
    )
    assert "keep a copy of only the part you need (x[:, 0].clone())" in lines[base + 3]
    views = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("  ") and "per run: shape [6, 16, 16]" in line
    )
    assert "(views: their memory is their bases')" in lines[views]


class _Halve(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape  # traced as size ops: torch keeps int64 scalars for them in C++
        return x.reshape(b // 2, c * 2)


def _trace(x: torch.Tensor) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace is deprecated
        return torch.jit.trace(_Halve(), x)


def test_growth_torch_keeps_for_each_trace_is_not_the_tests_leak():
    def step():
        x = torch.ones(4, 3)
        assert _trace(x)(x).shape == (2, 6)

    found = examine(step, LeakCheck(3))
    assert found.message is None
    assert found.torch_own is not None
    assert "growth kept inside torch, not counted as a leak" in found.torch_own
    assert "TorchScript function(s)" in found.torch_own
    assert check_for_leaks(step, LeakCheck(3)) is None


_outputs: list[torch.Tensor] = []


def test_a_real_leak_beside_a_trace_still_fails_and_names_both():
    def step():
        x = torch.ones(4, 3)
        _outputs.append(_trace(x)(x))

    message = check_for_leaks(step, LeakCheck(3))
    _outputs.clear()
    assert message is not None
    assert "held by list `_outputs`" in message or "which list `_outputs`" in message
    lines = message.splitlines()
    scalars = next(i for i, line in enumerate(lines) if "shape [], int64, cpu" in line)
    assert lines[scalars + 1] == (
        "    held by no Python object: torch keeps them from C++, where no referrer search"
        " sees them"
    )
    assert "torch keeps every compiled graph" in lines[scalars + 2]


def test_tensors_no_python_object_holds_without_torchscript_get_general_advice():
    key = GroupKey((), "int64", "cpu", False, None)
    censuses = [Census({key: n}, {key: 8 * n}, {"cpu": 8 * n}) for n in (1, 2, 3, 4)]
    verdict = Verdict(True, ["cpu"])
    (found,) = culprits(censuses, verdict.devices)
    assert isinstance(found, Culprit) and found.per_run == 1
    message = report(censuses, verdict, LeakCheck(3), [found], {key: Evidence(None, None)}, "")
    assert "held by no Python object: torch keeps them from C++" in message
    assert "nothing in Python to clear: something torch keeps in C++ holds them" in message
