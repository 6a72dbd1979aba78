"""Unit tests of per-test seeding and RNG restoration."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from pytest_torch.core import seeding
from pytest_torch.core.options import parse_base_seed

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def test_derive_seed_is_stable_and_per_test():
    a = seeding.derive_seed(0, "tests/test_x.py::test_a")
    assert a == seeding.derive_seed(0, "tests/test_x.py::test_a")
    assert a != seeding.derive_seed(0, "tests/test_x.py::test_b")
    assert a != seeding.derive_seed(1, "tests/test_x.py::test_a")
    assert 0 <= a < 2**32


@pytest.mark.parametrize("text", ["abc", "1.5", "", "-3"])
def test_parse_base_seed_rejects_bad_values(text):
    with pytest.raises(ValueError, match="--torch-seed"):
        parse_base_seed(text, source="--torch-seed")


def test_parse_base_seed_accepts_integers():
    assert parse_base_seed("1234", source="x") == 1234
    assert parse_base_seed(" 0x10 ", source="x") == 16


def test_seed_all_makes_every_generator_repeat():
    def draw():
        return random.random(), np.random.rand(), torch.rand(3)

    seeding.seed_all(7)
    first = draw()
    seeding.seed_all(7)
    second = draw()
    assert first[:2] == second[:2]
    assert torch.equal(first[2], second[2])


def test_restore_puts_back_the_previous_streams():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    snapshot = seeding.capture()
    expected = (random.random(), np.random.rand(), torch.rand(2))
    seeding.restore(snapshot)
    seeding.seed_all(99)
    random.random()
    torch.rand(5)
    seeding.restore(snapshot)
    got = (random.random(), np.random.rand(), torch.rand(2))
    assert got[:2] == expected[:2]
    assert torch.equal(got[2], expected[2])


@pytest.mark.accelerator
def test_accelerator_generators_are_seeded_and_restored(accelerator):
    module = torch.get_device_module(accelerator)
    torch.ones(1, device=accelerator)  # initialised: its state is captured, not re-seeded
    untouched = module.get_rng_state_all()
    snapshot = seeding.capture()
    seeding.seed_all(1234)
    first = torch.randn(8, device=accelerator)
    seeding.seed_all(1234)
    assert torch.equal(torch.randn(8, device=accelerator), first)
    assert not torch.equal(torch.randn(8, device=accelerator), first)
    seeding.restore(snapshot)
    assert all(
        torch.equal(a, b) for a, b in zip(module.get_rng_state_all(), untouched, strict=True)
    )


@pytest.mark.cuda(reason="CUDA seeds itself at its lazy initialisation")
def test_an_uninitialised_cuda_is_left_for_its_default_seed(tmp_path):
    """capture() must not create a context; after restore, CUDA's first draws are the
    ones a fresh process gets."""
    code = """
import torch
from pytest_torch.core import seeding
snapshot = seeding.capture()
assert not torch.cuda.is_initialized()
seeding.seed_all(99)
seeding.restore(snapshot)
print(torch.randn(4, device="cuda").tolist())
"""
    fresh = "import torch; print(torch.randn(4, device='cuda').tolist())"
    outputs = [
        subprocess.run(
            [sys.executable, "-c", c], capture_output=True, text=True, timeout=120, check=True
        ).stdout
        for c in (code, fresh)
    ]
    assert outputs[0] == outputs[1]
