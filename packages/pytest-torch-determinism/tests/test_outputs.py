"""Freezing a run's outputs and comparing two runs."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import pytest
import torch

from pytest_torch.determinism.outputs import CannotCompare, Difference, differences, freeze


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


class Holder:  # no == of its own: compared by its attributes
    def __init__(self, logits, tag):
        self.logits = logits
        self.tag = tag


class Broken:
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        raise ValueError("no comparison here")


class Fuzzy:
    def __eq__(self, other):
        return "maybe"


def test_distributions_and_objects_are_compared_by_their_tensors():
    logits = torch.tensor([0.5, 1.5, -1.0])
    leaves = freeze(torch.distributions.Categorical(logits=logits))
    assert [path for path, _ in leaves] == ["output.probs", "output.logits"]
    same = freeze(torch.distributions.Categorical(logits=logits.clone()))
    assert differences(leaves, same) == []
    (other,) = differences(
        freeze(torch.distributions.Normal(torch.zeros(2), torch.ones(2))),
        freeze(torch.distributions.Normal(torch.zeros(2), torch.full((2,), 2.0))),
    )
    assert other.path == "output.scale" and other.max_abs == 1.0
    held = freeze(Holder(logits, "x"))
    assert [path for path, _ in held] == ["output.logits", "output.tag"]
    assert differences(held, freeze(Holder(logits.clone(), "x"))) == []
    (tag,) = differences(held, freeze(Holder(logits, "y")))
    assert tag.describe() == "output.tag: the value differs (compared with ==)"


def test_what_cannot_be_compared_says_where_and_why():
    with pytest.raises(CannotCompare) as info:
        differences(freeze({"a": [Broken(1)]}), freeze({"a": [Broken(1)]}))
    assert str(info.value).startswith(
        "cannot compare Broken at output['a'][0]: its == raised ValueError: no"
        " comparison here; return tensors"
    )
    with pytest.raises(CannotCompare, match=r"at output: its == returned str, not True or False"):
        differences(freeze(Fuzzy()), freeze(Fuzzy()))
    with pytest.raises(CannotCompare, match=r"list_iterator at output\['steps'\]: an iterator"):
        differences(freeze({"steps": iter([])}), freeze({"steps": iter([])}))
    gen = (i for i in range(3))
    with pytest.raises(CannotCompare, match="cannot compare generator at output"):
        differences(freeze(gen), freeze(i for i in range(3)))
    assert differences(freeze(gen), freeze(gen)) == []  # the very same object
    assert list(gen) == [0, 1, 2]  # and it was not consumed


def test_tensors_of_every_kind():
    nan = torch.tensor([float("nan"), 1.0])
    assert differences(freeze(nan), freeze(nan.clone())) == []
    assert differences(freeze(torch.empty(0, 3)), freeze(torch.empty(0, 3))) == []
    z = torch.tensor([1 + 2j, 3 - 1j])
    assert differences(freeze(z.conj()), freeze(z.conj().resolve_conj())) == []
    assert differences(freeze(z), freeze(z + 1j))[0].max_abs == 1.0
    sparse = torch.sparse_coo_tensor(
        torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,), check_invariants=True
    )
    assert differences(freeze(sparse), freeze(sparse.clone())) == []
    (moved,) = differences(freeze(sparse), freeze(sparse * 2))
    assert (moved.differing, moved.total) == (2, 4)
    meta = torch.empty(3, device="meta")
    assert differences(freeze(meta), freeze(torch.empty(3, device="meta"))) == []


def test_cycles_and_functions():
    loop: dict = {"x": torch.ones(1)}
    loop["self"] = loop
    assert [path for path, _ in freeze(loop)] == ["output['x']", "output['self']"]
    assert differences(freeze(loop), freeze(loop)) == []
    assert differences(freeze(lambda: 1), freeze(lambda: 1)) == []
