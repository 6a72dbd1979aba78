"""The uninitialised-memory probe: every empty-family tensor gets the run's bytes."""

from __future__ import annotations

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
