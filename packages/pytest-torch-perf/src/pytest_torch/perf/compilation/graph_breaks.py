"""Reading dynamo's graph-break records for a person: where a graph broke in the user's
code, what torch said, and the fix for the causes that have a known one (why a function
compiled again is ``recompiles``).

torch's own words are kept (its graph-break type, first explanation line and the link
to its graph-break page); the fixes are ours, chosen by the graph-break type, which
torch keeps stable in its registry (``torch/_dynamo/graph_break_registry.json``).
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pytest_torch.core.sites import (
    Site,
    is_internal,
    is_library,
    library_path,
    shown_path,
    site_of,
    site_of_stack,
)


@dataclass(frozen=True)
class Place(Site):
    """A line of the user's code (core's :class:`~pytest_torch.core.sites.Site`), shown
    the way the compile report shows lines."""

    def describe(self, root: str | None = None) -> str:
        where = f"{shown_path(self.filename)}:{self.lineno}"
        text = f"{where}  {self.source}" if self.source else where
        return f"{text}  (in {self.via})" if self.via else text

    @classmethod
    def of(cls, site: Site | None) -> Place | None:
        if site is None:
            return None
        return cls(site.filename, site.lineno, site.source, site.via, site.function)


@dataclass
class GraphBreak:
    """One place where a compiled graph ended, and why."""

    place: Place | None
    #: torch's graph-break type, e.g. "Failed to trace builtin operator"
    title: str
    #: torch's first line of explanation ("" when it gave none)
    explanation: str
    fix: str
    #: torch's page on this graph break ("" when it gave none)
    link: str = ""
    #: how many times dynamo hit it (each compile of the function, each frame inlining it)
    count: int = 1
    #: where in torch it broke, when the break is inside torch's own code ("" otherwise):
    #: ``torch: torch/optim/optimizer.py:79`` or ``torch's own code``
    inside_torch: str = ""
    #: the function torch.compile gave up on because of this break, which then ran
    #: uncompiled, e.g. ``forward (models.py:25)`` ("" when the graph broke and went on)
    skipped: str = ""

    def describe(self) -> list[str]:
        where = self.place.describe() if self.place is not None else "(no line of yours found)"
        if self.inside_torch:
            where += f"  (inside {self.inside_torch})"
        times = f"  [in {self.count} compiles]" if self.count > 1 else ""
        lines = [f"{where}{times}"]
        said = f"{self.title}: {self.explanation}" if self.explanation else self.title
        lines.append(f"torch: {said}")
        if self.skipped:
            lines.append(
                f"torch.compile could not go on after this break, so {self.skipped} ran"
                f" uncompiled (functions it calls may still compile on their own)"
            )
        if self.fix:
            lines.append(f"fix: {self.fix}")
        if self.link:
            lines.append(f"more: {self.link}")
        return lines


def place_of_stack(stack: Sequence[Any]) -> Place | None:
    """The user's line in a stack of ``FrameSummary`` (outermost first): the innermost
    frame of the user's own code; when the break happened inside an installed library,
    the library's line goes with it."""
    return Place.of(site_of_stack(stack))


def torch_line(stack: Sequence[Any]) -> str:
    """``torch/optim/optimizer.py:79``: the innermost line of a stack, inside torch."""
    for frame in reversed(stack):
        if frame.lineno is not None:
            return f"{library_path(frame.filename)}:{frame.lineno}"
    return ""


def place_of_frame(start: FrameType | None) -> Place | None:
    """The user's line among the live frames from ``start`` outwards (the same rule as
    a host sync's site: the user's frame, and the library line below it)."""
    return Place.of(site_of(start))


# -- graph breaks ------------------------------------------------------------------------

_PRINT = (
    "printing inside compiled code ends the graph there: remove the print, move it after"
    " the compiled call, or skip it while compiling:"
    " `if not torch.compiler.is_compiling(): print(...)`"
)
_LOGGING = (
    "logging inside compiled code ends the graph there: log outside the compiled call,"
    " or skip it while compiling (`if not torch.compiler.is_compiling(): log.info(...)`);"
    " torch._dynamo.config.ignore_logging_functions.add(log.info) removes the break by"
    " dropping that call under torch.compile"
)
_SCALAR = (
    "reading a tensor's value on the host ({what}) leaves the graph: keep it a tensor"
    " (torch.where, torch.clamp, masks instead of Python numbers), or let dynamo capture"
    " it: torch._dynamo.config.capture_scalar_outputs = True"
)
_BRANCH = (
    "a Python `if`/`while` on a tensor's value cannot be traced: make it branchless"
    " (torch.where(cond, a, b), torch.clamp, torch.nan_to_num), or use"
    " torch.cond(pred, true_fn, false_fn, operands) for real control flow"
)
_SKIPPED = (
    "{what} cannot be traced (a C extension, a builtin or a library dynamo skips): call it"
    " outside the compiled function and pass the result in, replace it with a torch"
    " operation, or wrap it as a custom op (torch.library.custom_op) so the graph calls"
    " it whole"
)
_SKIPPED_ON_PURPOSE = (
    "torch does not trace {what} on purpose: call it outside the compiled function; for"
    " a training step, compile the model (or the forward pass and the loss) and run"
    " optimizer.step(), zero_grad() and the LR scheduler after it. Where you compile"
    " them on purpose, these breaks are by design: allow them in the budget"
    " (graph_breaks=N)"
)
_INSIDE_TORCH = (
    "torch's own code ends the graph here on purpose (torch.optim does, around"
    " optimizer.step): keep this call outside the compiled function (compile the model,"
    " or the forward pass and the loss, and run optimizer.step(), zero_grad() and LR"
    " schedulers after it), or, where you compile it on purpose, allow these breaks in"
    " the budget (graph_breaks=N)"
)
_WARNING = (
    "the warnings module (warnings.warn, catch_warnings, simplefilter) cannot be traced,"
    " so the graph ends there: warn or filter warnings outside the compiled call, or"
    " skip it while compiling: `if not torch.compiler.is_compiling(): warnings.warn(...)`"
)
_BACKWARD = (
    "backward() cannot run inside the compiled function: compile the model (or the forward"
    " pass and the loss) and call loss.backward() after it; its backward pass is still"
    " compiled"
)
_BUILTIN = (
    "dynamo cannot trace the builtin {what} here: compute it outside the compiled"
    " function and pass the result in, or use a torch operation instead"
)
_DISABLED = (
    "this function is excluded from compilation with torch.compiler.disable, so the"
    " graph stops around it: remove the decorator if it can be traced, or allow this"
    " break in the budget"
)
_EXPLICIT = "an explicit torch._dynamo.graph_break() call: remove it to keep one graph"
_EXPLICIT_TITLE = "Call to `torch._dynamo.graph_break()`"
_DYNAMIC_SHAPE = (
    "an operator whose output size depends on the data (nonzero, masked_select,"
    " boolean indexing, unique): use a fixed-size form (torch.where with a mask), or"
    " torch._dynamo.config.capture_dynamic_output_shape_ops = True"
)
_TOLIST = (
    "Tensor.tolist() copies the values to the host and leaves the graph: keep the"
    " tensor, or do the Python work outside the compiled function"
)

_NAMED = re.compile(r"`([^`]+)`")


def _named(explanation: str) -> str:
    """The first back-quoted name in torch's explanation (``print``, ``posix.getpid.``)."""
    found = _NAMED.search(explanation)
    return f"`{found.group(1).rstrip('.')}`" if found else "a call"


def fix_for(title: str, explanation: str, hints: Sequence[str] = ()) -> str:
    """Our fix for a graph-break type; torch's first hint when we have none."""
    lowered = title.lower()
    if title.startswith("Failed to trace builtin operator"):
        if "`print`" in explanation:
            return _PRINT
        return _BUILTIN.format(what=_named(explanation))
    if "logging" in lowered and ("logger" in lowered or "logging" in explanation.lower()):
        return _LOGGING
    if "tensor.item()" in lowered:
        return _SCALAR.format(what="Tensor.item()")
    if "tensor.tolist()" in lowered:
        return _TOLIST
    if title.startswith(("generic_jump", "Data-dependent branching")) or (
        "data-dependent" in lowered and "branch" in lowered
    ):
        return _BRANCH
    if title.startswith("Skip calling `torch.compiler.disable()`d function"):
        return _DISABLED
    if title.startswith(_EXPLICIT_TITLE):
        return _EXPLICIT
    if "marked as skipped" in lowered and "`_warnings." in explanation:
        return _WARNING
    if "marked as skipped" in lowered:
        if "intentionally marked" in explanation or "should not be traced" in explanation:
            return _SKIPPED_ON_PURPOSE.format(what=_named(explanation))
        return _SKIPPED.format(what=_named(explanation))
    if "tensor.backward()" in lowered:
        return _BACKWARD
    if title.startswith("Dynamic shape operator"):
        return _DYNAMIC_SHAPE
    return hints[0] if hints else ""


_TITLES = {
    "generic_jump": "Data-dependent branching",
}


def parse_reason(reason: str) -> tuple[str, str, list[str], str]:
    """torch's graph-break text -> (type, first explanation line, hints, link)."""
    lines = [line.strip() for line in reason.strip().splitlines()]
    title = lines[0] if lines else "graph break"
    explanation, hints, link = "", [], ""
    for line in lines[1:]:
        if line.startswith("Explanation:") and not explanation:
            explanation = line.removeprefix("Explanation:").strip()
        elif line.startswith("Hint:"):
            hints.append(line.removeprefix("Hint:").strip())
        elif "please visit:" in line:
            link = line.split("please visit:", 1)[1].strip()
    for raw, better in _TITLES.items():
        if title.startswith(raw):
            explanation = explanation or "a Python branch on a tensor's value"
            title = better
    return title, explanation, hints, link


@dataclass(frozen=True)
class SkippedFrame:
    """A frame torch.compile gave up on and ran uncompiled (dynamo's compilation metrics
    of a compile that failed softly), in the shape of a graph-break record."""

    reason: str
    user_stack: tuple[traceback.FrameSummary, ...]
    function: str


def skipped_frame(metrics: Any) -> SkippedFrame | None:
    """The SkippedFrame in one of dynamo's ``CompilationMetrics``, or None when that
    compile made a graph, raised to the caller, or hit the recompile limit (reported on
    its own)."""
    if getattr(metrics, "fail_type", None) not in _SOFT_FAILURES:
        return None
    if getattr(metrics, "has_guarded_code", False):
        return None
    reason = str(getattr(metrics, "fail_reason", "") or "")
    if any(marker in reason for marker in _LIMIT_MARKERS):
        return None
    stack = []
    name = getattr(metrics, "co_name", None) or "a function"
    defined_in, first_line = (
        getattr(metrics, "co_filename", None),
        getattr(metrics, "co_firstlineno", None),
    )
    function = "the whole compiled call"  # torch's own wrapper around it
    if defined_in and first_line:
        stack.append(traceback.FrameSummary(defined_in, first_line, name, line=""))
        if not is_internal(defined_in):
            function = f"`{name}` ({shown_path(defined_in)}:{first_line})"
    failed_in = getattr(metrics, "fail_user_frame_filename", None)
    failed_at = getattr(metrics, "fail_user_frame_lineno", None)
    if failed_in and failed_at:
        stack.append(traceback.FrameSummary(failed_in, failed_at, name, line=""))
    return SkippedFrame(reason, tuple(stack), function)


#: how dynamo fails softly: the frame runs uncompiled, the caller sees no error
_SOFT_FAILURES = ("Unsupported", "UserError")
#: dynamo's words when a function is recompiled more often than its limit allows
_LIMIT_MARKERS = ("recompile limit", "cache_size_limit", "recompile_limit")


def graph_breaks_of(records: Iterable[tuple[Any, Place | None]]) -> list[GraphBreak]:
    """dynamo's ``GraphCompileReason`` records and the frames it gave up on
    (SkippedFrame), each with the user's line that led to its compile -> one GraphBreak
    per place and type, in the order they happened (a break hit again, by a recompile or
    a frame inlining it, adds to its count). A break inside torch's own code is shown at
    that user's line, with torch's line beside it; so is a break inside an installed
    library met again when the library's function is compiled on its own."""
    found: dict[tuple[Place | None, str], GraphBreak] = {}
    stacks: dict[tuple[Place | None, str], list[tuple[tuple[str, int | None], ...]]] = {}
    for record, reached_from in records:
        if not getattr(record, "graph_break", True):
            continue
        title, explanation, hints, link = parse_reason(str(getattr(record, "reason", "")))
        stack = list(getattr(record, "user_stack", None) or ())
        lines = tuple((str(frame.filename), frame.lineno) for frame in stack)
        place = place_of_stack(stack)
        skipped = str(getattr(record, "function", "")) if isinstance(record, SkippedFrame) else ""
        if (
            place is not None
            and not place.via
            and is_library(place.filename)
            and reached_from is not None
            and not is_library(reached_from.filename)
        ):
            via = f"{library_path(place.filename)}:{place.lineno}"
            place = Place(reached_from.filename, reached_from.lineno, reached_from.source, via)
        inside = ""
        if place is None:
            line = torch_line(stack)
            place, inside = reached_from, f"torch: {line}" if line else "torch's own code"
        elif title.startswith(_EXPLICIT_TITLE) and "graph_break" not in place.source:
            # torch's own graph_break() (torch.optim's, say), recorded at the user's call
            inside = "torch's own code"
        key = (place, title)
        if skipped and key not in found:
            # torch gave up on the frame because of a break already listed at this line
            # (its own reason is then a consequence, e.g. "Reconstruction failure")
            earlier = next((item for item in found.values() if item.place == place), None)
            if earlier is not None:
                earlier.skipped = earlier.skipped or skipped
                continue
        if key in found:
            seen = stacks[key]
            if skipped:  # the same break, seen again as the frame it made torch give up
                found[key].skipped = found[key].skipped or skipped
            elif not any(
                len(lines) < len(other) and other[-len(lines) :] == lines for other in seen
            ):
                found[key].count += 1
            # else: a function inlined where it broke, compiled on its own after the
            # break and breaking there again: the same break, met twice in one call
            seen.append(lines)
            continue
        stacks[key] = [lines]
        fix = fix_for(title, explanation, hints)
        if inside and (title.startswith(_EXPLICIT_TITLE) or "marked as skipped" in title):
            fix = _INSIDE_TORCH
        found[key] = GraphBreak(
            place, title, explanation, fix, link, inside_torch=inside, skipped=skipped
        )
    return list(found.values())
