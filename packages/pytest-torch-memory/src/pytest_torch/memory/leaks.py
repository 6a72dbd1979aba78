"""The leak check: run a body repeatedly and fail when every run leaves more behind.

One warm-up run absorbs one-time work (lazily created optimizer state, compiled code,
caches filled on first use). Then each of ``iterations`` runs is followed by a garbage
collection and a :mod:`census <pytest_torch.memory.census>`. A leak is growth in *every*
run, in live tensors or in bytes on some device, beyond the tolerance: one-off growth
is not a leak, and the first run that leaves no more behind ends the check (a body that
does not leak runs twice, one that leaks 1 + ``iterations`` times). Only when a leak is
proven does one more, traced run find the lines that create the accumulating tensors
(:mod:`culprits`); passing checks pay for censuses only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core.peaks import format_bytes
from pytest_torch.memory.census import (
    Census,
    GroupKey,
    frozen_heap,
    group_key,
    live_objects,
    node_name,
    take_census,
)
from pytest_torch.memory.leak_parameters import (
    MARKER,
    LeakCheck,
)

if TYPE_CHECKING:
    import torch

    from pytest_torch.memory.culprits import Holder

#: groups named in a report, and groups looked into to choose them
MAX_CULPRITS = 3
MAX_CANDIDATES = 12


class MemoryLeakError(AssertionError):
    """Every run of a body left more tensors or bytes behind than the one before."""


class Verdict(NamedTuple):
    tensors: bool
    #: devices whose bytes grew in every run
    devices: list[str]
    #: autograd graph nodes held by Python grew in every run
    nodes: bool = False

    @property
    def leaking(self) -> bool:
        return self.tensors or bool(self.devices) or self.nodes


def _steps(series: Sequence[int]) -> list[int]:
    return [after - before for before, after in itertools.pairwise(series)]


def judge(censuses: Sequence[Census], check: LeakCheck) -> Verdict:
    """Whether every run grew beyond the tolerance (the first census is the reference)."""
    totals = [census.total for census in censuses]
    tensors = all(step > check.tolerance_tensors for step in _steps(totals))
    names = sorted({name for census in censuses for name in census.device_bytes})
    leaking_devices = [
        name
        for name in names
        if all(
            step > check.tolerance_bytes
            for step in _steps([c.device_bytes.get(name, 0) for c in censuses])
        )
    ]
    nodes = all(
        step > check.tolerance_tensors for step in _steps([c.total_nodes for c in censuses])
    )
    return Verdict(tensors, leaking_devices, nodes)


class Culprit(NamedTuple):
    key: GroupKey
    tensors: int
    #: tensors added per run; 0 for a group that is replaced, not added to
    per_run: float
    bytes: int
    bytes_per_run: float

    def describe(self) -> str:
        noun = "tensor" if self.tensors == 1 else "tensors"
        if self.per_run:
            return (
                f"{self.tensors} {noun}, {_number(self.per_run)} per run: {self.key.describe()}"
                f" (+{format_bytes(self.bytes_per_run)} per run)"
            )
        return (
            f"{self.tensors} {noun}: {self.key.describe()}, {format_bytes(self.bytes)} in all,"
            f" made new by the last run (each run replaces it with a bigger one)"
        )


def culprits(censuses: Sequence[Census], verdict: Verdict) -> list[Culprit]:
    """The groups that accumulate, most telling first."""
    first, previous, last = censuses[0], censuses[-2], censuses[-1]
    runs = len(censuses) - 1
    found = []
    for key, count in last.counts.items():
        counts = [c.counts.get(key, 0) for c in censuses]
        if all(step > 0 for step in _steps(counts)):
            sizes = [c.group_bytes.get(key, 0) for c in censuses]
            per_run = (counts[-1] - counts[0]) / runs
            found.append(Culprit(key, count, per_run, sizes[-1], (sizes[-1] - sizes[0]) / runs))
    if found:
        found.sort(key=lambda c: (-c.per_run, -c.bytes_per_run, str(c.key)))
        return found[:MAX_CANDIDATES]
    # no group grows steadily: the groups that are new or bigger since the previous run,
    # on the devices that leak bytes (a buffer replaced by a bigger one in each run)
    for key, count in last.counts.items():
        if verdict.devices and key.device not in verdict.devices:
            continue
        size = last.group_bytes.get(key, 0)
        if size > previous.group_bytes.get(key, 0) or count > previous.counts.get(key, 0):
            found.append(Culprit(key, count, 0.0, size, 0.0))
    found.sort(key=lambda c: (-c.bytes, str(c.key)))
    del first
    return found[:MAX_CANDIDATES]


class NodeCulprit(NamedTuple):
    """Autograd graph nodes of one type that Python keeps, more after every run."""

    name: str
    nodes: int
    per_run: float

    def describe(self) -> str:
        noun = "node" if self.nodes == 1 else "nodes"
        return (
            f"{self.nodes} autograd graph {noun} {self.name} (grad_fn objects),"
            f" {_number(self.per_run)} per run"
        )


def node_culprits(censuses: Sequence[Census]) -> list[NodeCulprit]:
    """The types of graph nodes whose count grew in every run."""
    runs = len(censuses) - 1
    found = []
    for name, count in censuses[-1].nodes.items():
        counts = [c.nodes.get(name, 0) for c in censuses]
        if all(step > 0 for step in _steps(counts)):
            found.append(NodeCulprit(name, count, (counts[-1] - counts[0]) / runs))
    found.sort(key=lambda c: (-c.per_run, c.name))
    return found[:MAX_CULPRITS]


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _series(values: Sequence[int], fmt: Callable[[int], str]) -> str:
    shown = [fmt(v) for v in values]
    if len(shown) > 7:
        shown = [*shown[:3], "...", *shown[-3:]]
    return " -> ".join(shown)


class Evidence(NamedTuple):
    """Where a culprit group's tensors come from and who holds them."""

    site: str | None
    holder: str | None
    #: the per-step structure (dict, tuple) the tensors sit in, inside a container
    structure: str | None = None


GRAPH_NODE_ADVICE = (
    "you keep autograd graph nodes (grad_fn): keep the tensor's value with .detach()"
    " or drop the reference"
)


def advice(key: GroupKey, evidence: Evidence, per_run: float) -> str | None:
    """What to do about a group of tensors, from what they are and what holds them."""
    holder = evidence.holder or ""
    scalar = not key.shape and key.layout == "strided"
    if evidence.structure is not None:
        keep = "loss.item()" if scalar else "tensor.detach()"
        graph = f" with their autograd graph ({key.grad_fn})" if key.grad_fn is not None else ""
        cpu = ".cpu()" if key.device != "cpu" else ""
        return (
            f"an output structure is kept on every run: each run's outputs, in a"
            f" {evidence.structure} inside that container{graph}. Keep only what you need,"
            f" detached ({keep}{cpu}), or clear or bound the container"
        )
    if key.grad_fn is not None:
        keep = "loss.item() (a Python float)" if scalar else "tensor.detach()"
        return (
            f"they hold an autograd graph ({key.grad_fn}), which keeps every step's"
            f" activations alive: store {keep} instead of {'loss' if scalar else 'the tensor'}"
        )
    if holder.startswith(("buffer ", "parameter ")):
        kind = holder.split(" ", 1)[0]
        return (
            f"a new {kind} is registered on every run: register it once (in __init__) and"
            f" update it in place, or delete it when the step is done"
        )
    if not holder:
        return None
    if holder.startswith("the cache of "):
        return (
            "a functools.lru_cache keeps every result it returned, and a new key (a new"
            " self, a new tensor argument) on every run adds one: bound it"
            " (lru_cache(maxsize=N)), clear it (method.cache_clear()), or key it by values"
            " that repeat (shapes, not tensors)"
        )
    if per_run:
        return (
            "plain tensors (no autograd graph) pile up there: clear or bound the container"
            " (e.g. collections.deque(maxlen=N)), or keep only summaries (.item())"
        )
    return "it is replaced by a bigger one on every run: clear or bound what it accumulates"


def report(
    censuses: Sequence[Census],
    verdict: Verdict,
    check: LeakCheck,
    found: Sequence[Culprit],
    evidence: Mapping[GroupKey, Evidence],
    traced: str,
    more: int = 0,
    nodes: Sequence[tuple[NodeCulprit, str | None]] = (),
) -> str:
    """The failure message of a leak check."""
    runs = len(censuses) - 1
    lines = [f"memory leak: each of the {runs} runs after the warm-up left more behind."]
    if verdict.tensors:
        totals = [c.total for c in censuses]
        lines.append(
            f"  live tensors after each run: {_series(totals, str)}"
            f" (+{_number((totals[-1] - totals[0]) / runs)} per run;"
            f" tolerance {check.tolerance_tensors})"
        )
    for device in verdict.devices:
        values = [c.device_bytes.get(device, 0) for c in censuses]
        lines.append(
            f"  bytes allocated on {device} after each run: {_series(values, format_bytes)}"
            f" (+{format_bytes((values[-1] - values[0]) / runs)} per run;"
            f" tolerance {format_bytes(check.tolerance_bytes)})"
        )
    if verdict.nodes and (nodes or not verdict.tensors):
        values = [c.total_nodes for c in censuses]
        lines.append(
            f"  autograd graph nodes held by Python after each run: {_series(values, str)}"
            f" (+{_number((values[-1] - values[0]) / runs)} per run;"
            f" tolerance {check.tolerance_tensors})"
        )
    if found or nodes:
        lines.append("What accumulates:")
    for node, node_holder in nodes:
        lines.append(f"  {node.describe()}")
        if node_holder:
            lines.append(f"    held by {node_holder}")
        lines.append(
            f"    {GRAPH_NODE_ADVICE}; each node keeps the tensors its graph saved for backward"
        )
    graph_holder = False  # a group named above keeps an autograd graph
    for culprit in found:
        lines.append(f"  {culprit.describe()}")
        found_evidence = evidence.get(culprit.key, Evidence(None, None))
        if found_evidence.site:
            lines.append(f"    created at {found_evidence.site}")
        if found_evidence.holder:
            lines.append(f"    held by {found_evidence.holder}")
        elif nodes:
            lines.append("    no name holds them: the autograd graph nodes above do")
            continue
        elif graph_holder:
            lines.append("    no name holds them: the autograd graph of the tensors above does")
            continue
        if culprit.key.grad_fn is not None:
            graph_holder = graph_holder or found_evidence.holder is not None
        text = advice(culprit.key, found_evidence, culprit.per_run)
        if text:
            lines.append(f"    {text}")
    if more:
        lines.append(
            f"  ... and {more} more group(s) growing with them: tensors kept alive through"
            f" the ones above (for example by their autograd graph)"
        )
    if not found and not nodes:
        lines.append(
            "  No tensor that Python can see accumulates: the memory is held outside Python"
            " (a C++ cache, a custom allocator, or tensors saved inside an autograd graph)."
        )
    lines.append(
        f"How it was checked: 1 warm-up run, then {runs} runs of the test body with the same"
        f" fixtures, gc.collect() and a census of live tensors after each{traced}. If this"
        f" growth is expected, allow it: @pytest.mark.{MARKER}(tolerance_tensors=N,"
        f" tolerance_bytes='64KiB')"
    )
    return "\n".join(lines)


def _is_view(tensor: Any) -> bool:
    try:
        return tensor._base is not None
    except Exception:  # a tensor kind that cannot say
        return False


def _evidence(
    found: Sequence[Culprit], nodes: Sequence[NodeCulprit], sites: Any, root: str | None
) -> tuple[dict[GroupKey, Evidence], list[Any], list[Any]]:
    """Creation sites of the culprits' tensors (from the traced run), one tensor of each
    group to look for holders of, and one graph node of each growing node type."""
    wanted = {culprit.key for culprit in found}
    examples: dict[GroupKey, Any] = {}
    found_sites: dict[GroupKey, str] = {}
    tensors, graph_nodes = live_objects()
    node_examples: dict[str, object] = {}
    wanted_nodes = {node.name for node in nodes}
    for graph_node in graph_nodes:
        if node_name(graph_node) in wanted_nodes:
            node_examples.setdefault(node_name(graph_node), graph_node)
    del graph_nodes
    rank: dict[GroupKey, tuple[bool, bool]] = {}
    for tensor in tensors:
        key = group_key(tensor)
        if key not in wanted or key is None:
            continue
        site = sites.site_of(tensor) if sites is not None else None
        # a view first: it holds its base from C++, where no referrer search sees it, so
        # only the view leads to the list that keeps both (kornia's filters return
        # ``output.view(...)``); then one whose creation line is known
        here = (_is_view(tensor), site is not None)
        if key not in examples or here > rank[key]:
            examples[key], rank[key] = tensor, here
            if site is not None:
                found_sites[key] = site.describe(root)
        elif site is not None and key not in found_sites:
            found_sites[key] = site.describe(root)
    del tensors
    evidence = {key: Evidence(found_sites.get(key), None) for key in wanted}
    return (
        evidence,
        [examples.get(c.key) for c in found],
        [node_examples.get(n.name) for n in nodes],
    )


def check_for_leaks(
    run: Callable[[], object],
    check: LeakCheck,
    accelerators: Sequence[torch.device] = (),
    root: str | None = None,
) -> str | None:
    """Run ``run`` up to ``check.iterations + 1`` times; the failure message of a leak,
    or None. The runs stop at the first that leaves no more behind than the one before
    (the verdict cannot be a leak after it): a body that does not leak runs twice.

    Every run starts from the random state the first one started from (Python's,
    NumPy's and torch's generators on every device): a body that draws random inputs
    draws the same ones each time, as it does in a run without the check, and the
    generators are left as one run leaves them. Exceptions from ``run`` propagate.
    ``root`` shortens the file names in the report.
    """
    from pytest_torch.core import seeding
    from pytest_torch.memory.culprits import creation_sites, find_holder

    start = seeding.capture()

    def again() -> object:
        seeding.restore(start)
        return run()

    with frozen_heap():
        run()
        censuses = [take_census(accelerators)]
        for _ in range(check.iterations):
            again()
            censuses.append(take_census(accelerators))
            if not judge(censuses, check).leaking:
                # a leak is every run growing: once one has not, the runs left cannot
                # make it one, so a body that does not leak runs twice, not 1 + iterations
                break
        verdict = judge(censuses, check)
        if not verdict.leaking:
            return None
        # one more run, traced, so the accumulating tensors can be traced to their lines
        sites = creation_sites()
        try:
            with sites:
                again()
            traced = "; one more run traced where tensors are created"
            found = culprits([*censuses, take_census(accelerators)], verdict)
        except Exception:  # the report can do without creation sites
            sites, traced = None, ""
            found = culprits(censuses, verdict)
        grown = node_culprits(censuses) if verdict.nodes else []
        evidence, examples, node_examples = _evidence(found, grown, sites, root)
    # referrers are searched outside the frozen heap: the holders are usually older
    ignore = (examples, node_examples)
    for culprit, example in zip(found, examples, strict=True):
        if example is not None:
            holder: Holder | None = find_holder(example, ignore=ignore)
            if holder is not None:
                evidence[culprit.key] = evidence[culprit.key]._replace(
                    holder=holder.text, structure=holder.structure
                )
    nodes: list[tuple[NodeCulprit, str | None]] = []
    for node, node_example in zip(grown, node_examples, strict=True):
        node_holder = None if node_example is None else find_holder(node_example, ignore)
        nodes.append((node, None if node_holder is None else node_holder.text))
    if found:
        # the census itself gives the nodes of live graphs a Python object: only nodes
        # that something with a name holds tell more than the tensors do
        nodes = [(node, holder) for node, holder in nodes if holder is not None]
    del examples, node_examples
    # what a name holds is where the fix goes: such groups first (the loss kept in a
    # list comes before the activations its graph keeps), in their order otherwise
    ranked = sorted(found, key=lambda c: evidence[c.key].holder is None)
    shown = ranked[:MAX_CULPRITS]
    more = len(ranked) - len(shown)
    return report(censuses, verdict, check, shown, evidence, traced, more, nodes)
