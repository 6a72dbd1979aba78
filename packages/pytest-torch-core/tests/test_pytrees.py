"""pytrees: what counts as a container, and every leaf with its path."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from pytest_torch.core.pytrees import MAX_DEPTH, children, leaves


class Pair(NamedTuple):
    a: object
    b: object


@dataclasses.dataclass
class Batch:
    x: object
    extras: dict


def test_children_of_each_kind_of_container():
    assert children(Pair(1, 2)) == [(".a", 1), (".b", 2)]
    assert children(Batch(1, {})) == [(".x", 1), (".extras", {})]
    assert children([1, 2]) == [("[0]", 1), ("[1]", 2)]
    assert children((1,)) == [("[0]", 1)]
    assert children({"k": 1, 2: "v"}) == [("['k']", 1), ("[2]", "v")]
    for leaf in ("text", b"bytes", 3, None, Batch):  # a dataclass type is not an instance
        assert children(leaf) is None


def test_leaves_with_paths_depth_first():
    value = {"out": Pair([1, 2], Batch("x", {"n": 3}))}
    assert list(leaves(value, "output")) == [
        ("output['out'].a[0]", 1),
        ("output['out'].a[1]", 2),
        ("output['out'].b.x", "x"),
        ("output['out'].b.extras['n']", 3),
    ]


def test_cycles_and_deep_nesting_end():
    loop: list = [1]
    loop.append(loop)
    assert list(leaves(loop)) == [("[0]", 1)]
    deep: list = ["leaf"]
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    assert list(leaves(deep)) == []
