"""Walking the nested outputs and inputs of models: tuples, lists, dicts, named tuples and
dataclasses, with a readable path to every leaf.

``children`` is the one definition of what a container is, for every plugin that walks
user values (perf finds the tensors of a call's inputs, determinism freezes outputs);
a plugin with values of its own to look into (distributions, modules) handles those
first and asks ``children`` for the rest. Strings and bytes are leaves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

#: how deep :func:`leaves` follows containers
MAX_DEPTH = 64


def children(value: Any) -> list[tuple[str, Any]] | None:
    """``(path suffix, child)`` of a container, or None for a leaf: ``.field`` for
    dataclasses and named tuples, ``[index]`` for lists and tuples, ``[key!r]`` for
    mappings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f".{item.name}", getattr(value, item.name)) for item in dataclasses.fields(value)]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return [(f".{name}", getattr(value, name)) for name in value._fields]
    if isinstance(value, (list, tuple)):
        return [(f"[{index}]", item) for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        return [(f"[{key!r}]", item) for key, item in value.items()]
    return None


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf under ``value`` with its path, depth first; a container met again
    inside itself, or nested deeper than ``MAX_DEPTH``, is not followed."""
    yield from _leaves(value, path, set(), 0)


def _leaves(value: Any, path: str, parents: set[int], depth: int) -> Iterator[tuple[str, Any]]:
    found = children(value)
    if found is None:
        yield path, value
        return
    if id(value) in parents or depth >= MAX_DEPTH:
        return
    inner = parents | {id(value)}
    for suffix, child in found:
        yield from _leaves(child, path + suffix, inner, depth + 1)
