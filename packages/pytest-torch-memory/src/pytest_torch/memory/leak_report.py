"""The failure message of a leak check: what grew, what accumulates, where it was made,
what holds it, and advice that fits the holder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from pytest_torch.core.peaks import format_bytes
from pytest_torch.memory.accumulation import number
from pytest_torch.memory.leak_parameters import MARKER

if TYPE_CHECKING:
    from pytest_torch.memory.accumulation import Culprit, NodeCulprit
    from pytest_torch.memory.census import Census, GroupKey
    from pytest_torch.memory.leak_parameters import LeakCheck
    from pytest_torch.memory.leaks import Verdict


class Evidence(NamedTuple):
    """Where a culprit group's tensors come from and who holds them."""

    site: str | None
    holder: str | None
    #: the per-step structure (dict, tuple) the tensors sit in, inside a container
    structure: str | None = None
    #: the group's tensors are views: their memory is their bases'
    views: bool = False
    #: the holder is views of the group's tensors (a view keeps its whole base alive)
    through_views: bool = False


GRAPH_NODE_ADVICE = (
    "you keep autograd graph nodes (grad_fn): keep the tensor's value with .detach()"
    " or drop the reference"
)
NO_PYTHON_HOLDER = (
    "held by no Python object: torch keeps them from C++, where no referrer search sees them"
)


def series(values: Sequence[int], fmt: Callable[[int], str]) -> str:
    shown = [fmt(v) for v in values]
    if len(shown) > 7:
        shown = [*shown[:3], "...", *shown[-3:]]
    return " -> ".join(shown)


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
    if evidence.through_views:
        return (
            "a view (x[:, 0], x.view(...), x.transpose(...)) keeps its whole base alive:"
            " keep a copy of only the part you need (x[:, 0].clone()) instead of the view,"
            " or clear or bound what holds the views"
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
    if per_run and holder.startswith("key `"):
        return (
            "a dict gets a new key on every run and keeps every earlier entry (a cache keyed"
            " by a length or shape that keeps changing): bound it (evict old keys,"
            " functools.lru_cache(maxsize=N)), or key it by values that repeat"
        )
    if per_run:
        return (
            "plain tensors (no autograd graph) pile up there: clear or bound the container"
            " (e.g. collections.deque(maxlen=N)), or keep only summaries (.item())"
        )
    return "it is replaced by a bigger one on every run: clear or bound what it accumulates"


def inside_torch_advice(compiled: int) -> str:
    """Why tensors that no Python object holds are kept, and what to do."""
    if compiled:
        return (
            f"this run compiled {compiled} TorchScript function(s) (torch.jit.trace or"
            " torch.jit.script), and torch keeps every compiled graph, with the constants it"
            " recorded, for the life of the process: trace or script once, outside the"
            " repeated body (a module-scoped fixture)"
        )
    return (
        "nothing in Python to clear: something torch keeps in C++ holds them (a TorchScript"
        " graph, a C++ extension's cache, tensors an autograd graph saved). Find the torch"
        " call in the body that keeps state, and make it once, outside the repeated body"
    )


def _group_lines(
    culprit: Culprit, evidence: Evidence, nodes: bool, graph_holder: bool, compiled: int
) -> tuple[list[str], bool]:
    """The lines of one group, and whether its holder keeps an autograd graph."""
    described = culprit.describe()
    if evidence.views and not culprit.bytes_per_run:
        described = described.replace(" (+0 B per run)", " (views: their memory is their bases')")
    lines = [f"  {described}"]
    if evidence.site:
        lines.append(f"    created at {evidence.site}")
    if evidence.holder:
        lines.append(f"    held by {evidence.holder}")
    elif nodes:
        lines.append("    no name holds them: the autograd graph nodes above do")
        return lines, False
    elif graph_holder:
        lines.append("    no name holds them: the autograd graph of the tensors above does")
        return lines, False
    elif culprit.key.grad_fn is None:
        lines.append(f"    {NO_PYTHON_HOLDER}")
        lines.append(f"    {inside_torch_advice(compiled)}")
        return lines, False
    text = advice(culprit.key, evidence, culprit.per_run)
    if text:
        lines.append(f"    {text}")
    return lines, culprit.key.grad_fn is not None and evidence.holder is not None


def report(
    censuses: Sequence[Census],
    verdict: Verdict,
    check: LeakCheck,
    found: Sequence[Culprit],
    evidence: Mapping[GroupKey, Evidence],
    traced: str,
    more: int = 0,
    nodes: Sequence[tuple[NodeCulprit, str | None]] = (),
    compiled: int = 0,
    traced_total: int | None = None,
) -> str:
    """The failure message of a leak check (``compiled``: TorchScript functions the
    traced run added to torch's global compilation unit; ``traced_total``: the live
    tensors after it, which the groups below count)."""
    runs = len(censuses) - 1
    lines = [f"memory leak: each of the {runs} runs after the warm-up left more behind."]
    if verdict.tensors:
        totals = [c.total for c in censuses]
        after = "" if traced_total is None else f", {traced_total} after one more, traced run"
        lines.append(
            f"  live tensors after each run: {series(totals, str)}"
            f" (+{number((totals[-1] - totals[0]) / runs)} per run;"
            f" tolerance {check.tolerance_tensors}){after}"
        )
    for device in verdict.devices:
        values = [c.device_bytes.get(device, 0) for c in censuses]
        lines.append(
            f"  bytes allocated on {device} after each run: {series(values, format_bytes)}"
            f" (+{format_bytes((values[-1] - values[0]) / runs)} per run;"
            f" tolerance {format_bytes(check.tolerance_bytes)})"
        )
    if verdict.nodes and (nodes or not verdict.tensors):
        values = [c.total_nodes for c in censuses]
        lines.append(
            f"  autograd graph nodes held by Python after each run: {series(values, str)}"
            f" (+{number((values[-1] - values[0]) / runs)} per run;"
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
        shown = evidence.get(culprit.key, Evidence(None, None))
        group, keeps_graph = _group_lines(culprit, shown, bool(nodes), graph_holder, compiled)
        lines += group
        graph_holder = graph_holder or keeps_graph
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
