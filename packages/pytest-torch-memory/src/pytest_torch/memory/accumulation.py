"""Which groups of tensors (and autograd graph nodes) accumulate over a leak check's
runs, from the censuses taken after each run.

A group is the tensors of one shape, dtype, device and autograd node (see
:class:`~pytest_torch.memory.census.GroupKey`). Three patterns are told apart, because
each needs other advice: a group that grows in every run (a list that keeps each run's
tensor), tensors of one kind that come in a new shape each run (a cache keyed by a
length that keeps changing: every group holds one tensor, but their number grows), and
a group replaced by a bigger one each run (a buffer that grows).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

from pytest_torch.core.peaks import format_bytes
from pytest_torch.memory.census import Census, GroupKey

#: groups looked into to choose the ones named in a report
MAX_CANDIDATES = 12
#: node types named in a report
MAX_NODE_TYPES = 3
#: shapes listed for a kind of tensor that comes in a new shape each run
MAX_SHAPES = 4


def steps(series: Sequence[int]) -> list[int]:
    return [after - before for before, after in itertools.pairwise(series)]


def number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


class Culprit(NamedTuple):
    key: GroupKey
    tensors: int
    #: tensors added per run; 0 for a group that is replaced, not added to
    per_run: float
    bytes: int
    bytes_per_run: float
    #: for tensors of one kind that come in a new shape each run: the shapes added
    #: since the first census (``key`` is then the newest shape's group)
    shapes: tuple[tuple[int, ...], ...] = ()

    def describe(self) -> str:
        noun = "tensor" if self.tensors == 1 else "tensors"
        if self.shapes:
            listed = [str(list(shape)) for shape in self.shapes]
            if len(listed) > MAX_SHAPES:
                listed = [*listed[: MAX_SHAPES - 1], "...", listed[-1]]
            kind = self.key.describe().split(", ", 1)[1]
            return (
                f"{self.tensors} {noun}, {number(self.per_run)} per run, in a new shape each"
                f" run ({', '.join(listed)}): {kind}"
                f" (+{format_bytes(self.bytes_per_run)} per run)"
            )
        if self.per_run:
            return (
                f"{self.tensors} {noun}, {number(self.per_run)} per run: {self.key.describe()}"
                f" (+{format_bytes(self.bytes_per_run)} per run)"
            )
        return (
            f"{self.tensors} {noun}: {self.key.describe()}, {format_bytes(self.bytes)} in all,"
            f" made new by the last run (each run replaces it with a bigger one)"
        )


def culprits(censuses: Sequence[Census], leaking_devices: Sequence[str]) -> list[Culprit]:
    """The groups that accumulate, most telling first."""
    runs = len(censuses) - 1
    found = []
    for key, count in censuses[-1].counts.items():
        counts = [c.counts.get(key, 0) for c in censuses]
        if all(step > 0 for step in steps(counts)):
            sizes = [c.group_bytes.get(key, 0) for c in censuses]
            per_run = (counts[-1] - counts[0]) / runs
            found.append(Culprit(key, count, per_run, sizes[-1], (sizes[-1] - sizes[0]) / runs))
    found += _new_shape_each_run(censuses, {c.key._replace(shape=()) for c in found})
    if found:
        found.sort(key=lambda c: (-c.per_run, -c.bytes_per_run, str(c.key)))
        return found[:MAX_CANDIDATES]
    # no group grows steadily: the groups that are new or bigger since the previous run,
    # on the devices that leak bytes (a buffer replaced by a bigger one in each run)
    previous, last = censuses[-2], censuses[-1]
    for key, count in last.counts.items():
        if leaking_devices and key.device not in leaking_devices:
            continue
        size = last.group_bytes.get(key, 0)
        if size > previous.group_bytes.get(key, 0) or count > previous.counts.get(key, 0):
            found.append(Culprit(key, count, 0.0, size, 0.0))
    found.sort(key=lambda c: (-c.bytes, str(c.key)))
    return found[:MAX_CANDIDATES]


def _new_shape_each_run(censuses: Sequence[Census], seen: set[GroupKey]) -> list[Culprit]:
    """Kinds of tensors (a group's key but its shape) whose number grows in every run
    while no group of theirs does: each run adds a tensor of a shape not seen before."""
    runs = len(censuses) - 1
    kinds: dict[GroupKey, list[tuple[int, int]]] = {}
    for index, census in enumerate(censuses):
        for key, count in census.counts.items():
            kind = key._replace(shape=())
            if kind in seen:
                continue
            series = kinds.setdefault(kind, [(0, 0)] * len(censuses))
            tensors, size = series[index]
            series[index] = (tensors + count, size + census.group_bytes.get(key, 0))
    found = []
    first, last = censuses[0], censuses[-1]
    for kind, series in kinds.items():
        counts = [tensors for tensors, _ in series]
        if not all(step > 0 for step in steps(counts)):
            continue
        added = [
            key
            for key, count in last.counts.items()
            if key._replace(shape=()) == kind and count > first.counts.get(key, 0)
        ]
        if len(added) < runs:  # one shape grew: a steady group, not new shapes
            continue
        added.sort(key=lambda key: key.shape)
        sizes = [size for _, size in series]
        found.append(
            Culprit(
                added[-1], counts[-1], (counts[-1] - counts[0]) / runs, sizes[-1],
                (sizes[-1] - sizes[0]) / runs, tuple(key.shape for key in added),
            )
        )  # fmt: skip
    return found


class NodeCulprit(NamedTuple):
    """Autograd graph nodes of one type that Python keeps, more after every run."""

    name: str
    nodes: int
    per_run: float

    def describe(self) -> str:
        noun = "node" if self.nodes == 1 else "nodes"
        return (
            f"{self.nodes} autograd graph {noun} {self.name} (grad_fn objects),"
            f" {number(self.per_run)} per run"
        )


def node_culprits(censuses: Sequence[Census]) -> list[NodeCulprit]:
    """The types of graph nodes whose count grew in every run."""
    runs = len(censuses) - 1
    found = []
    for name, count in censuses[-1].nodes.items():
        counts = [c.nodes.get(name, 0) for c in censuses]
        if all(step > 0 for step in steps(counts)):
            found.append(NodeCulprit(name, count, (counts[-1] - counts[0]) / runs))
    found.sort(key=lambda c: (-c.per_run, c.name))
    return found[:MAX_NODE_TYPES]
