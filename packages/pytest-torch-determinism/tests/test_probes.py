"""The uninitialised-memory probe: every empty-family tensor gets the run's bytes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from pytest_torch.determinism import flags
from pytest_torch.determinism.probes import PATTERNS, uninitialised_filled


def _bytes(tensor: torch.Tensor) -> set[int]:
    raw = torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())
    return set(raw.tolist())


@pytest.mark.parametrize("pattern", [0, 1])
def test_every_empty_family_op_gets_the_runs_byte(pattern):
    base = torch.ones(3, 4)
    with uninitialised_filled(pattern):
        made = [
            torch.empty(3, 4),
            torch.empty_like(base),
            base.new_empty((5,)),
            torch.empty_strided((2, 2), (1, 4)),  # its storage has bytes no element covers
            base.new_empty_strided((2, 3), (3, 1)),
            torch.empty_permuted((2, 3, 4), (2, 0, 1)),
            torch.empty(7, dtype=torch.float64),
            torch.empty(7, dtype=torch.int16),
        ]
    for tensor in made:
        assert _bytes(tensor) == {PATTERNS[pattern]}, tensor
    assert _bytes(base) == _bytes(torch.ones(1))  # written tensors are left alone


def test_bool_memory_gets_valid_bools():
    for pattern, expected in ((0, False), (1, True)):
        with uninitialised_filled(pattern):
            flags_ = torch.empty(9, dtype=torch.bool)
        assert flags_.tolist() == [expected] * 9


def test_resize_fills_only_the_new_bytes():
    tensor = torch.arange(4, dtype=torch.float32)
    with uninitialised_filled(1):
        tensor.resize_(8)
    assert tensor[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert _bytes(tensor[4:].clone()) == {PATTERNS[1]}


def test_the_fill_replaces_torchs_nan_fill_of_deterministic_mode():
    with flags.using(flags.deterministic(fill_uninitialized_memory=True)):
        plain = torch.empty(4)
        with uninitialised_filled(0):
            probed = torch.empty(4)
    assert plain.isnan().all()  # torch's fill: every run the same, so it hides garbage
    assert _bytes(probed) == {PATTERNS[0]}


def test_none_is_torch_as_it_is():
    with uninitialised_filled(None):
        assert torch.zeros(3).tolist() == [0.0] * 3


def test_a_wrapper_subclass_without_memory_is_left_alone():
    # writing through such a storage killed the process (a segfault), hence its own one
    code = textwrap.dedent(
        """
        import torch
        from pytest_torch.determinism.probes import uninitialised_filled

        class Wrapped(torch.Tensor):
            @staticmethod
            def __new__(cls, inner):
                made = torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)
                made.inner = inner
                return made

            @classmethod
            def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
                unwrap = lambda t: t.inner if isinstance(t, Wrapped) else t
                out = func(*map(unwrap, args), **{k: unwrap(v) for k, v in (kwargs or {}).items()})
                return Wrapped(out) if isinstance(out, torch.Tensor) else out

        with uninitialised_filled(0):
            wrapped = torch.empty_like(Wrapped(torch.ones(3)))
            plain = torch.empty(3)
        print(type(wrapped).__name__, torch.empty(0, dtype=torch.uint8).set_(plain.untyped_storage()).unique().tolist())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["Wrapped", f"[{PATTERNS[0]}]"]
