"""The leak check: run a body repeatedly and fail when every run leaves more behind.

One warm-up run absorbs one-time work (lazily created optimizer state, compiled code,
caches filled on first use). Then each of ``iterations`` runs is followed by a garbage
collection and a :mod:`census <pytest_torch.memory.census>`. A leak is growth in *every*
run, in live tensors or in bytes on some device, beyond the tolerance: one-off growth
is not a leak, and the first run that leaves no more behind ends the check (a body that
does not leak runs twice, one that leaks 1 + ``iterations`` times). Only when a leak is
proven does one more, traced run find the lines that create the accumulating tensors
(:mod:`culprits`); passing checks pay for censuses only. The groups that accumulate are
chosen by :mod:`accumulation`, the message written by :mod:`leak_report`.

Growth that torch keeps by itself is not the test's: tensors no Python object holds,
made while the run compiled TorchScript (``torch.jit.trace`` keeps every traced graph
and its constants for the life of the process), are not counted as a leak; the check
says so instead of passing in silence (:attr:`Findings.torch_own`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core import seeding
from pytest_torch.memory.accumulation import (
    Culprit,
    NodeCulprit,
    culprits,
    node_culprits,
    steps,
)
from pytest_torch.memory.census import (
    Census,
    GroupKey,
    frozen_heap,
    group_key,
    live_objects,
    node_name,
    take_census,
)
from pytest_torch.memory.culprits import creation_sites, find_holder
from pytest_torch.memory.leak_parameters import LeakCheck
from pytest_torch.memory.leak_report import Evidence, report

if TYPE_CHECKING:
    import torch

#: groups named in a report
MAX_CULPRITS = 3


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


def judge(censuses: Sequence[Census], check: LeakCheck) -> Verdict:
    """Whether every run grew beyond the tolerance (the first census is the reference)."""
    totals = [census.total for census in censuses]
    tensors = all(step > check.tolerance_tensors for step in steps(totals))
    names = sorted({name for census in censuses for name in census.device_bytes})
    leaking_devices = [
        name
        for name in names
        if all(
            step > check.tolerance_bytes
            for step in steps([c.device_bytes.get(name, 0) for c in censuses])
        )
    ]
    nodes = all(step > check.tolerance_tensors for step in steps([c.total_nodes for c in censuses]))
    return Verdict(tensors, leaking_devices, nodes)


def _is_view(tensor: Any) -> bool:
    try:
        return tensor._base is not None
    except Exception:  # a tensor kind that cannot say
        return False


class _Examples(NamedTuple):
    """What the culprits' live tensors tell: per group its creation line, one tensor to
    look for holders of and whether they are views; per base, a view of it."""

    sites: dict[GroupKey, str]
    tensors: dict[GroupKey, Any]
    views: set[GroupKey]
    #: id of a culprit tensor that is the base of a live view -> that view
    viewed: dict[int, Any]
    nodes: dict[str, object]


def _examples(
    found: Sequence[Culprit], nodes: Sequence[NodeCulprit], sites: Any, root: str | None
) -> _Examples:
    wanted = {culprit.key for culprit in found}
    chosen = _Examples({}, {}, set(), {}, {})
    tensors, graph_nodes = live_objects()
    wanted_nodes = {node.name for node in nodes}
    for graph_node in graph_nodes:
        if node_name(graph_node) in wanted_nodes:
            chosen.nodes.setdefault(node_name(graph_node), graph_node)
    del graph_nodes
    keys = {id(tensor): group_key(tensor) for tensor in tensors}
    for tensor in tensors:
        if _is_view(tensor) and keys.get(id(tensor._base)) in wanted:
            chosen.viewed.setdefault(id(tensor._base), tensor)
    rank: dict[GroupKey, tuple[bool, bool, bool]] = {}
    for tensor in tensors:
        key = keys[id(tensor)]
        if key is None or key not in wanted:
            continue
        site = sites.site_of(tensor) if sites is not None else None
        # a view first: it holds its base from C++, where no referrer search sees it, so
        # only the view leads to the list that keeps both (kornia's filters return
        # ``output.view(...)``); then a base whose view is alive; then one whose creation
        # line is known
        view = _is_view(tensor)
        if view:
            chosen.views.add(key)
        here = (view, id(tensor) in chosen.viewed, site is not None)
        if key not in chosen.tensors or here > rank[key]:
            chosen.tensors[key], rank[key] = tensor, here
        if site is not None and (key not in chosen.sites or here >= rank[key]):
            chosen.sites[key] = site.describe(root)
    return chosen


def _holders(found: Sequence[Culprit], chosen: _Examples) -> dict[GroupKey, Evidence]:
    """Each culprit's evidence, with what holds it (outside the frozen heap: holders are
    usually older than the runs)."""
    ignore = (chosen, chosen.tensors, chosen.viewed, chosen.nodes)
    evidence = {}
    for culprit in found:
        key = culprit.key
        shown = Evidence(chosen.sites.get(key), None, views=key in chosen.views)
        example = chosen.tensors.get(key)
        holder = None if example is None else find_holder(example, ignore=ignore)
        if holder is not None:
            shown = shown._replace(holder=holder.text, structure=holder.structure)
        elif example is not None and id(example) in chosen.viewed:
            view = chosen.viewed[id(example)]
            what = view_key.describe() if (view_key := group_key(view)) else "tensor"
            held = find_holder(view, ignore=ignore)
            by = f", which {held.text} holds" if held is not None else ""
            shown = shown._replace(
                holder=f"their views ({what}){by}",
                through_views=True,
            )
        evidence[key] = shown
    return evidence


def _node_holders(
    grown: Sequence[NodeCulprit], chosen: _Examples, tensors_found: bool
) -> list[tuple[NodeCulprit, str | None]]:
    """The growing node types with what holds them; beside accumulating tensors, only
    those something with a name holds (the census itself gives the nodes of live graphs
    a Python object: unnamed ones tell no more than the tensors do)."""
    nodes: list[tuple[NodeCulprit, str | None]] = []
    for node in grown:
        example = chosen.nodes.get(node.name)
        held = None if example is None else find_holder(example, (chosen, chosen.nodes))
        if held is not None or not tensors_found:
            nodes.append((node, None if held is None else held.text))
    return nodes


def _compiled_functions() -> int | None:
    """How many functions torch's global TorchScript compilation unit holds (None before
    torch.jit is loaded): ``torch.jit.trace`` and ``torch.jit.script`` add to it, and
    nothing takes them out."""
    state = sys.modules.get("torch.jit._state")
    unit = getattr(state, "_python_cu", None)
    try:
        return None if unit is None else len(unit.get_functions())
    except Exception:  # a torch whose compilation unit cannot list them
        return None


class Findings(NamedTuple):
    """What a leak check found: the failure message of a leak (None: no leak), and,
    where all the growth was torch's own, why it was not counted."""

    message: str | None
    torch_own: str | None = None


def _torch_own(verdict: Verdict, found: Sequence[Culprit],
               evidence: dict[GroupKey, Evidence], compiled: int) -> str | None:  # fmt: skip
    """Why the growth is torch's own, or None: TorchScript was compiled in the traced
    run, and every accumulating tensor is plain (no autograd graph) and held by no
    Python object, on the CPU (an accelerator's allocator figure sees more than
    tensors)."""
    if not compiled or not found or verdict.nodes or set(verdict.devices) - {"cpu"}:
        return None
    if any(evidence[c.key].holder or c.key.grad_fn is not None for c in found):
        return None
    per_run = sum(c.per_run for c in found)
    return (
        f"growth kept inside torch, not counted as a leak: +{per_run:g} tensors per run that"
        f" no Python object holds, while the run compiled {compiled} TorchScript"
        " function(s) (torch.jit.trace/script keep every compiled graph, with its"
        " constants, for the life of the process); trace or script once, outside the body"
        " (a module-scoped fixture), to check the rest"
    )


def examine(
    run: Callable[[], object],
    check: LeakCheck,
    accelerators: Sequence[torch.device] = (),
    root: str | None = None,
) -> Findings:
    """Run ``run`` up to ``check.iterations + 1`` times: a leak's failure message, or
    none. The runs stop at the first that leaves no more behind than the one before
    (the verdict cannot be a leak after it): a body that does not leak runs twice.

    Every run starts from the random state the first one started from (Python's,
    NumPy's and torch's generators on every device): a body that draws random inputs
    draws the same ones each time, as it does in a run without the check, and the
    generators are left as one run leaves them. Exceptions from ``run`` propagate.
    ``root`` shortens the file names in the report.
    """
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
            return Findings(None)
        # one more run, traced, so the accumulating tensors can be traced to their lines
        sites = creation_sites()
        before = _compiled_functions()
        traced_total: int | None = None
        try:
            with sites:
                again()
            traced = "; one more run traced where tensors are created"
            after_traced = take_census(accelerators)
            traced_total = after_traced.total
            found = culprits([*censuses, after_traced], verdict.devices)
        except Exception:  # the report can do without creation sites
            sites, traced = None, ""
            found = culprits(censuses, verdict.devices)
        after = _compiled_functions()
        compiled = after - before if after is not None and before is not None else 0
        grown = node_culprits(censuses) if verdict.nodes else []
        chosen = _examples(found, grown, sites, root)
    evidence = _holders(found, chosen)
    nodes = _node_holders(grown, chosen, bool(found))
    del chosen
    own = _torch_own(verdict, found, evidence, compiled)
    if own is not None:
        return Findings(None, own)
    # what a name holds is where the fix goes: such groups first (the loss kept in a
    # list comes before the activations its graph keeps), in their order otherwise
    ranked = sorted(found, key=lambda c: evidence[c.key].holder is None)
    shown = ranked[:MAX_CULPRITS]
    more = len(ranked) - len(shown)
    message = report(
        censuses, verdict, check, shown, evidence, traced, more, nodes, compiled, traced_total
    )
    return Findings(message)


def check_for_leaks(
    run: Callable[[], object],
    check: LeakCheck,
    accelerators: Sequence[torch.device] = (),
    root: str | None = None,
) -> str | None:
    """:func:`examine`'s failure message of a leak, or None (growth that is torch's own
    included)."""
    return examine(run, check, accelerators, root).message
