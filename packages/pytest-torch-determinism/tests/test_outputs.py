"""Freezing a run's outputs and comparing two runs."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import torch

from pytest_torch.determinism.outputs import Difference, differences, freeze


@dataclasses.dataclass
class StepResult:
    loss: float
    grads: dict


class Pair(NamedTuple):
    left: torch.Tensor
    right: torch.Tensor


def test_freeze_names_every_leaf_and_copies_tensors():
    tensor = torch.zeros(2)
    leaves = freeze((Pair(tensor, tensor), [StepResult(0.5, {"w": tensor})], "tag"))
    assert [path for path, _ in leaves] == [
        "output[0].left",
        "output[0].right",
        "output[1][0].loss",
        "output[1][0].grads['w']",
        "output[2]",
    ]
    tensor += 1  # a later run writing into the same tensor changes nothing recorded
    assert leaves[0][1].sum() == 0


def test_bitwise_comparison():
    a = torch.tensor([1.0, float("nan"), 0.0, 3.0])
    same = torch.tensor([1.0, float("nan"), 0.0, 3.0])
    assert differences(freeze(a), freeze(same)) == []
    (signed,) = differences(freeze(a), freeze(torch.tensor([1.0, float("nan"), -0.0, 3.0])))
    assert signed == Difference("output", 1, 4, 0.0)
    (off,) = differences(freeze(a), freeze(torch.tensor([1.0, float("nan"), 0.0, 3.5])))
    assert (off.differing, off.max_abs) == (1, 0.5)
    assert off.describe() == "output: 1 of 4 elements differ (max abs difference 0.5)"
    (nan,) = differences(freeze(a), freeze(torch.tensor([1.0, 2.0, 0.0, 3.0])))
    assert math.isinf(nan.max_abs) and "NaN/Inf in one run only" in nan.describe()


def test_tolerances_structure_and_plain_values():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])
    assert differences(freeze(a), freeze(b), atol=1e-5) == []
    assert differences(freeze(a), freeze(b))
    (shape,) = differences(freeze(a), freeze(torch.zeros(3)))
    assert shape.kind == "shape" and shape.describe() == "output: the shape differs"
    (structure,) = differences(freeze([a]), freeze([a, a]))
    assert structure.kind == "structure"
    (value,) = differences(freeze({"loss": 0.25}), freeze({"loss": 0.5}))
    assert value.path == "output['loss']" and value.max_abs == 0.25
    ints = differences(freeze(torch.tensor([1, 2, 3])), freeze(torch.tensor([1, 5, 3])))
    assert ints == [Difference("output", 1, 3, 3.0)]
