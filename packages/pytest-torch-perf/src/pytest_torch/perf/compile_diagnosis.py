"""Reading dynamo's records for a person: where a graph broke in the user's code, what
torch said, and the fix for the causes that have a known one; why a recompile happened,
and what stops it.

torch's own words are kept (its graph-break type, first explanation line and the link
to its graph-break page); the fixes are ours, chosen by the graph-break type, which
torch keeps stable in its registry (``torch/_dynamo/graph_break_registry.json``).
"""

from __future__ import annotations

import linecache
import re
import traceback
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pytest_torch.perf.sync_sites import (
    UNKNOWN,
    is_internal,
    is_library,
    library_path,
    shown_path,
    site_of,
)


@dataclass(frozen=True)
class Place:
    """A line of the user's code, and the installed library's line below it (if any)."""

    filename: str
    lineno: int
    source: str
    via: str = ""

    def describe(self) -> str:
        where = f"{shown_path(self.filename)}:{self.lineno}"
        text = f"{where}  {self.source}" if self.source else where
        return f"{text}  (in {self.via})" if self.via else text


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


def _frame_place(filename: str, lineno: int, inner: tuple[str, int] | None) -> Place:
    source = linecache.getline(filename, lineno).strip()
    via = f"{library_path(inner[0])}:{inner[1]}" if inner is not None else ""
    return Place(filename, lineno, source, via)


def place_of_stack(stack: Sequence[Any]) -> Place | None:
    """The user's line in a stack of ``FrameSummary`` (outermost first): the innermost
    frame of the user's own code; when the break happened inside an installed library,
    the library's line goes with it."""
    frames = [(f.filename, f.lineno) for f in stack if f.lineno is not None]
    outside = [(name, line) for name, line in frames if not is_internal(name)]
    if not outside:
        return None
    inner = outside[-1]
    own = [(name, line) for name, line in outside if not is_library(name)]
    if not own or own[-1] == inner:
        return _frame_place(inner[0], inner[1], None)
    return _frame_place(own[-1][0], own[-1][1], inner)


def torch_line(stack: Sequence[Any]) -> str:
    """``torch/optim/optimizer.py:79``: the innermost line of a stack, inside torch."""
    for frame in reversed(stack):
        if frame.lineno is not None:
            return f"{library_path(frame.filename)}:{frame.lineno}"
    return ""


def place_of_frame(start: FrameType | None) -> Place | None:
    """The user's line among the live frames from ``start`` outwards (the same rule as
    a host sync's site: the user's frame, and the library line below it)."""
    site = site_of(start)
    if site is UNKNOWN:
        return None
    return Place(site.filename, site.lineno, site.source, site.via)


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


# -- recompiles ---------------------------------------------------------------------------

_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:\s*")
_SOURCE_COMMENT = re.compile(r"\s{2,}#.*$")


def clean_guard_reason(text: str) -> str:
    """``0/0: tensor 'x' size mismatch ...`` -> ``tensor 'x' size mismatch ...``: the
    compile id, the source comment and the stack dynamo appends are dropped."""
    first = str(text).split("\nUser stack trace:", 1)[0].strip()
    first = _COMPILE_ID.sub("", first)
    # several failed guards of one cached graph come joined by "; ", each with its comment
    parts = [_SOURCE_COMMENT.sub("", part).strip() for part in re.split(r";\s+(?=\S)", first)]
    kept = [part for part in parts if part and not part.startswith(("to avoid", "#"))]
    cleaned = "; ".join(kept) if kept else first
    return cleaned.replace("tensor type, ' but found", "tensor type, but found")


_POSITIONAL = re.compile(r"^args\[(\d+)\]$")
_KEYWORD = re.compile(r"^kwargs\[['\"](\w+)['\"]\]$")


def _argument(name: str) -> str:
    """dynamo's name of an input, as a person would say it: ``args[0]`` (a compiled
    module's wrapper) -> "the 1st positional argument"."""
    positional = _POSITIONAL.match(name)
    if positional:
        number = int(positional.group(1)) + 1
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number if number < 20 else number % 10, "th")
        return f"the {number}{suffix} positional argument"
    keyword = _KEYWORD.match(name)
    if keyword:
        return f"the keyword argument {keyword.group(1)!r}"
    return repr(name)


_MODULE_PATH = re.compile(r"\._modules\[['\"](\w+)['\"]\]")


def _shorter(name: str) -> str:
    """``self._modules['net']._modules['1'].scale`` -> ``self.net.1.scale``."""
    return _MODULE_PATH.sub(r".\1", name)


_SIZE = re.compile(
    r"tensor '(.+)' size mismatch at index (\d+)(?:\. expected (\d+), actual (\d+))?"
)
_RANGE = re.compile(r"^(\d+) <= (\S+)\.size\(\)\[(\d+)\](?: <= (\d+))?$")
_OPTIONAL = re.compile(r"^(\S+) is (?:not )?None$")
_NONE_FOR_TENSOR = re.compile(r"expected type of '(.+)' to be a tensor type.*NoneType")
_NOT_A_FUNCTION = re.compile(r"Not a function on (\S+?)\.__code__")
_MOMENTUM = re.compile(r"param_groups\[\d+\]\[['\"](betas|momentum)['\"]\]")
_INT_GUARD = re.compile(r"^(\S+) == -?\d+$")
_SCALAR_GUARD = re.compile(r"^(\S+) == [-+.\w]+$")
_FLAG_GUARD = re.compile(r"^(\S+) == (True|False|None|'[^']*')$")
_STACK_VALUE = re.compile(r"^___stack\d+\S* == ")
_PARAMETER = re.compile(r"_(?:parameters|buffers)\[")
_GLOBAL = re.compile(r"^G\[['\"](\w+)['\"]\](.*)$")
_MARKING = re.compile(r"_has_dynamo_dim_marking|_dynamo_\w*indices")
_LEARNING_RATE = re.compile(r"param_groups\[\d+\]\[['\"]lr['\"]\] == ")
_TRAINING = re.compile(r"\.training == (True|False)")


def _intermediate(name: str) -> bool:
    """dynamo's name for a value made by the code before a graph break (``___stack0``)."""
    return name.startswith("___stack")


_SPECIALISED = (
    "sizes 0 and 1 are always compiled apart from other sizes (mark_dynamic and"
    " dynamic=True do not cover them): avoid them (drop_last=True for a DataLoader's last"
    " batch of one; a preallocated cache of fixed length rather than one that grows from"
    " empty), or mark the dimension unbacked"
    " before the call (torch._dynamo.decorators.mark_unbacked(tensor, {index})) if the"
    " code never branches on that size"
)
_INTERMEDIATE = (
    "a tensor made before a graph break (by nonzero, masked_select or boolean indexing,"
    " or computed from an input whose size changes) changes size from call to call, and"
    " the code after the break compiles again for it: compile with dynamic=True, or"
    " remove that graph break (for nonzero and the like, a fixed-size form such as"
    " torch.where with a mask, or torch._dynamo.config.capture_dynamic_output_shape_ops"
    " = True)"
)


def _repeated(reasons: Sequence[str]) -> bool:
    """Two compiled versions failed on the same Python number: torch already tried it as
    a dynamic value, and the code specialised it again."""
    names = [m.group(1) for m in map(_SCALAR_GUARD.match, reasons) if m]
    return len(names) != len(set(names))


def guard_key(reason: str) -> tuple[str, ...] | None:
    """What a guard is about (a tensor's dimension, a Python number), so that the same
    guard failing in two recompiles of one function can be told apart from two guards."""
    size = _SIZE.search(reason)
    if size:
        return ("size", size.group(1), size.group(2))
    number = _SCALAR_GUARD.match(reason)
    return ("number", number.group(1)) if number else None


def _number_fix(name: str, integer: bool, repeated: bool) -> str:
    """A Python int or float baked into the graph changed.  torch retries an argument,
    and any float, once as a dynamic value; a global's or a module's int and a length it
    bakes in for good."""
    kind = "int" if integer else "number"
    shown = _shorter(name)
    in_global = _GLOBAL.match(shown)
    if in_global:
        shown = in_global.group(1) + in_global.group(2)
    if shown.startswith("len(") and shown.endswith(")"):
        return (
            f"the length of {shown[4:-1]!r} (a list, tuple or dict) is baked into the"
            f" graph and changed: each length compiles once; keep it fixed (pad it to a"
            f" few lengths), or, where the items have one shape, stack them into one"
            f" tensor before the call"
        )
    if integer and shown.startswith("self."):
        return (
            f"the Python int {shown!r} is baked into the graph and changed: each value"
            f" compiles once (a loop count or a size has to be fixed); keep it constant,"
            f" or, for a module attribute that only enters arithmetic,"
            f" torch._dynamo.config.allow_unspec_int_on_nn_module = True (one more"
            f" compile, then any value)"
        )
    if integer and in_global:
        return (
            f"the global int {shown!r} is baked into the graph and changed: each value"
            f" compiles once; keep it constant, or pass it to the compiled function as an"
            f" argument (torch then compiles once more with it dynamic, for every value)"
        )
    if repeated:
        return (
            f"the Python {kind} {shown!r} is fixed by the code it enters (a loop count, a"
            f" size, a branch, or an operator argument torch keeps constant, such as"
            f" dropout's p), so every new value compiles again, even after torch made it"
            f" dynamic, and dynamic=True does not help: keep it to a few values (one"
            f" compile each), or make that code independent of it (e.g. dropout's mask"
            f" drawn by hand against a tensor p)"
        )
    avoid = (
        "hold it as a tensor (a buffer, for a module)"
        if in_global or shown.startswith("self.")
        else "compile with dynamic=True, or pass it as a tensor (torch.tensor(value))"
    )
    return (
        f"the Python {kind} {shown!r} was baked into the graph and changed: torch compiles"
        f" once more with it as a dynamic value, which then serves every value. Allow"
        f" this one recompile, or avoid it: {avoid}"
    )


_AUTOGRAD_KEY = re.compile(r"Autograd\w*")


def _dispatch_key_fix(reason: str) -> str:
    """An input is another kind of tensor than the one compiled for."""
    expected, _, actual = reason.partition("actual")
    if bool(_AUTOGRAD_KEY.search(expected)) != bool(_AUTOGRAD_KEY.search(actual)):
        return (
            "an input made under torch.inference_mode() (an inference tensor) took the"
            " place of an ordinary tensor, or the other way round: each kind compiles"
            " once; make every call's inputs the same way (all under"
            " torch.inference_mode(), or use torch.no_grad() instead of it)"
        )
    if ("Conjugate" in expected) != ("Conjugate" in actual) or ("Negative" in expected) != (
        "Negative" in actual
    ):
        return (
            "an input is a conjugated or negated view (x.conj()) in one call and not in"
            " another: call .resolve_conj() / .resolve_neg() before the call"
        )
    return (
        "an input is another kind of tensor than the one compiled for (a tensor subclass,"
        " a view of another kind, another backend): pass the same kind every call"
    )


def recompile_fix(
    reasons: Sequence[str],
    after_break_parameters: Collection[str] | None = None,
    broken: bool = False,
    again: Collection[tuple[str, ...]] = (),
) -> str:
    """What stops this kind of recompile (the first reason that has a known fix).
    ``after_break_parameters``: for the code after a graph break, the parameter names
    of its function (any other tensor there was made before the break); ``broken``:
    the compiled code has graph breaks; ``again``: the guards (``guard_key``) that
    failed first in another recompile of this function too."""
    for reason in reasons:
        limited = _RANGE.match(reason.split(";")[0].strip())
        if limited:
            low, name, index, high = limited.groups()
            if _intermediate(name):
                return _INTERMEDIATE
            if high is None and int(low) == 2:
                return (
                    f"dimension {index} of {_argument(name)} is dynamic for sizes of 2 and"
                    f" more, and this call has a size of 0 or 1: "
                    + _SPECIALISED.format(index=index)
                )
            return (
                f"dimension {index} of {_argument(name)} is dynamic, but the compiled code"
                f" holds only for sizes {low}..{high or 'up'}, and this call falls outside."
                f" The bound comes from a branch on that size in the code (e.g. `if"
                f" x.shape[{index}] > {high or low}:`: each side compiles once; allow the"
                f" recompile, or torch.cond to keep both sides in one graph), from min= or"
                f" max= given to mark_dynamic (widen them), or from an operator that treats"
                f" some sizes apart (allow the recompile)"
            )
        size = _SIZE.search(reason)
        if size:
            name, index, expected, actual = size.groups()
            if _intermediate(name) or (
                after_break_parameters is not None
                and name.isidentifier()
                and name not in after_break_parameters
            ):
                return _INTERMEDIATE
            if _PARAMETER.search(name):
                return (
                    f"{_shorter(name)!r} has another size here: modules of one class share"
                    f" their compiled code, and each shape of their parameters and"
                    f" buffers compiles once (a stack of layers of different widths"
                    f" compiled one by one does this): expect one recompile per shape and"
                    f" allow them; with more than torch._dynamo.config.recompile_limit"
                    f" shapes, raise it, or the rest runs uncompiled"
                )
            tensor = _argument(name)
            if {expected, actual} & {"0", "1"}:  # (None when torch gave no sizes)
                return (
                    f"dimension {index} of {tensor} changes to or from a size of 0 or 1: "
                    + _SPECIALISED.format(index=index)
                )
            if ("size", name, index) in again:
                return (
                    f"dimension {index} of {tensor} compiles again for each size, even"
                    f" after torch made it dynamic: the code fixes that size (a branch on"
                    f" it, torch.func.vmap over it, an operator that needs a fixed size),"
                    f" so mark_dynamic raises an error there and dynamic=True does not"
                    f" help: pad inputs to a few fixed sizes (drop_last=True for a"
                    f" DataLoader's last batch), or allow one recompile per size"
                )
            last_batch = (
                " (if this is a DataLoader's last, smaller batch, drop_last=True avoids it)"
                if index == "0" and expected and actual and int(actual) < int(expected)
                else ""
            )
            mark = (
                f"torch._dynamo.maybe_mark_dynamic(tensor, {index}): with graph breaks,"
                f" mark_dynamic fails when the code after a break fixes that size"
                if broken
                else f"torch._dynamo.mark_dynamic(tensor, {index})"
            )
            return (
                f"dimension {index} of {tensor} changes between calls{last_batch}: mark it"
                f" dynamic before the first call, with every input whose size goes with it"
                f" ({mark}), compile with dynamic=True, or pad inputs to a few fixed sizes"
            )
        optional = _OPTIONAL.match(reason) or _NONE_FOR_TENSOR.search(reason)
        if optional:
            return (
                f"{_argument(optional.group(1))} was None in one call and not in another:"
                f" each way compiles once; pass it the same way every call (e.g. always"
                f" a tensor, such as a mask of ones)"
            )
        if "dtype mismatch" in reason:
            return "the dtype of an input changes between calls: cast inputs to one dtype"
        if "rank mismatch" in reason:
            return "an input's number of dimensions changes between calls: keep one layout"
        if "requires_grad mismatch" in reason:
            return (
                "an input needs gradients in one call and not in another: keep it the"
                " same, or compile one function for training and one for inference"
            )
        if "GLOBAL_STATE changed" in reason and "autocast" in reason:
            return (
                "torch.autocast was switched on or off around the call: each setting"
                " compiles once; keep the compiled call always inside (or always outside)"
                " torch.autocast, or put the autocast inside the compiled function"
            )
        if "grad_mode" in reason:
            return (
                "called with gradients on and off (torch.no_grad() or"
                " torch.inference_mode() around some calls): keep one grad mode for a"
                " compiled function, or compile one for training and one for inference"
            )
        if "stride mismatch" in reason:
            return (
                "an input's strides changed between calls. Either its layout changed (a"
                " transposed, permuted or sliced view: call .contiguous() before the call,"
                " or keep one layout), or it is contiguous and a size it has changed (a"
                " tensor that grows, such as a cache, whose size is marked dynamic or"
                " unbacked): then torch compiles once more with the strides dynamic too;"
                " allow that recompile, or use a preallocated tensor of fixed size"
            )
        if "dispatch key set mismatch" in reason:
            return _dispatch_key_fix(reason)
        if _MOMENTUM.search(reason):
            return (
                "the optimizer's momentum (betas or momentum) is a Python number baked"
                " into the compiled optimizer step, and a scheduler changes it every step"
                " (OneCycleLR and CyclicLR do, with cycle_momentum=True; they write Python"
                " numbers, so tensor betas do not help): pass cycle_momentum=False, or"
                " leave the optimizer step uncompiled"
            )
        if _LEARNING_RATE.search(reason):
            return (
                "the learning rate is a Python number baked into the compiled optimizer"
                " step, and the LR scheduler changed it: give the optimizer a tensor,"
                " e.g. torch.optim.AdamW(params, lr=torch.tensor(1e-3))"
            )
        if _TRAINING.search(reason):
            return (
                "the model switched between train() and eval(): each mode compiles once;"
                " expect one recompile per mode, or compile one model per mode"
            )
        if _STACK_VALUE.match(reason):
            return (
                "a value read on the host (.item(), .tolist(), a Python number computed"
                " from a tensor) is baked into the code after a graph break, and it"
                " changed, so that code compiled again: where it only enters arithmetic,"
                " keep it a tensor (no break, nothing baked in); where it sets a loop"
                " count or a size, torch._dynamo.config.capture_scalar_outputs = True"
                " with dynamic=True, or a fixed count"
            )
        if _MARKING.search(reason):
            return (
                "a tensor was marked (mark_dynamic, mark_unbacked) in some calls and not"
                " in others: each way compiles once; mark the same dimensions before"
                " every call, including the first"
            )
        if "device mismatch" in reason:
            return "an input moves between devices: keep inputs on one device"
        function = _NOT_A_FUNCTION.search(reason)
        if function:
            return (
                f"a different function was passed as {_shorter(function.group(1))!r}"
                f" (here one that is not a Python function, such as a builtin or a C"
                f" function): each function compiles once; pass the same one every call,"
                f" or expect one compile per function"
            )
        if "___check_obj_id" in reason or "id(" in reason:
            return (
                "a new object (a module, a function, a non-tensor argument) took the"
                " place of the one compiled: reuse the same object between calls"
            )
        flag = _FLAG_GUARD.match(reason)
        if flag:
            return (
                f"the setting {_shorter(flag.group(1))!r} changed, and the compiled code"
                f" depends on it: each value compiles once; expect one recompile per"
                f" setting, or compile one model per setting"
            )
        if "GLOBAL_STATE changed" in reason:
            return (
                "a global torch setting (grad mode, autocast, deterministic algorithms,"
                " the default dtype...) differs from the one compiled with: keep it the"
                " same around the compiled call"
            )
        number = _INT_GUARD.match(reason) or _SCALAR_GUARD.match(reason)
        if number:
            name = number.group(1)
            repeated = _repeated(reasons) or ("number", name) in again
            return _number_fix(name, _INT_GUARD.match(reason) is not None, repeated)
    return ""
