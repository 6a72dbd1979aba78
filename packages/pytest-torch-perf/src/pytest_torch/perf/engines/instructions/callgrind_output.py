"""Reading Callgrind's output files: the instructions a dump counted, in all and per
function, and names a person can read.

The format (valgrind.org/docs/manual/cl-format.html): ``fn=``/``ob=`` lines say which
function and object the cost lines after them belong to; names may be compressed to
``(id) name`` the first time and ``(id)`` after, and a ``cfn=``/``cob=`` line defines ids
too. A cost line right after ``calls=`` is what the call cost in all (the callee's
cost, counted again there), so a function's own ("self") count leaves it out. The
instructions of a dump are its ``totals:`` (the sum of its cost lines), not the
``summary:`` of its header, which Valgrind 3.19 sometimes gets wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: how many functions a baseline keeps (those that counted most instructions)
KEPT_FUNCTIONS = 100
#: functions without a symbol (JIT-made code, stripped libraries), per object
NO_SYMBOL = "(code without symbols)"

_NAMED = re.compile(r"\((\d+)\)(?: (.*))?$")
_ADDRESS = re.compile(r"0x[0-9a-f]+$")
_OP = re.compile(r"\bat::_ops::(\w+)::")


class CallgrindOutputError(Exception):
    """A file that is not a Callgrind dump of instructions."""


@dataclass
class Dump:
    """One dump: its trigger, the instructions counted, and each function's own count
    (keyed by :func:`function_key`)."""

    trigger: str
    instructions: int
    functions: dict[str, int] = field(default_factory=dict)


def _short_object(path: str) -> str:
    return path.rsplit("/", 1)[-1] if path else "???"


def _strip_parameters(name: str) -> str:
    """``ns::f<T>(int, float) const`` -> ``ns::f<...>``: a C++ name without its parameter
    list and template arguments, which make it unreadable in a message."""
    text = re.sub(r"\s*(const|volatile|&|&&)$", "", name.strip())
    if text.endswith(")"):
        depth = 0
        for index in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[index], 0)
            if depth == 0:
                if not text[:index].endswith("anonymous namespace"):
                    text = text[:index]
                break
    out, depth = [], 0
    for char in text:
        if char == "<":
            if depth == 0:
                out.append("<...>")
            depth += 1
        elif char == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out).strip()


def function_key(name: str, obj: str) -> str:
    """How a function is named in baselines and messages: ``name (object)``, the C++
    parameters left out; symbol-less code is one entry per object."""
    name = re.sub(r"'\d+$", "", name)  # Callgrind's recursion-depth suffix
    if not name or _ADDRESS.match(name):
        name = NO_SYMBOL
    return f"{_strip_parameters(name) or name} ({_short_object(obj)})"


_INTERPRETER = re.compile(r"\((lib)?python[\d.]*(\.so[\d.]*)?\)$")


def is_interpreter(key: str) -> bool:
    """Whether the function (a :func:`function_key`) is the Python interpreter's own
    (``libpython3.11.so.1.0``, or a ``python3.11`` executable built without it)."""
    return _INTERPRETER.search(key) is not None


def interpreter_instructions(functions: Mapping[str, int]) -> int:
    """The instructions the Python interpreter's own functions counted."""
    return sum(value for key, value in functions.items() if is_interpreter(key))


_LIBC = re.compile(r"^(\S+) \(libc\.so[\d.]*\)$")
#: a compiler's suffix on a copy of a function (``unlink_chunk.constprop.0``)
_CLONE = re.compile(r"\.(constprop|isra|part|cold)(\.\d+)*")
#: glibc's allocator: its entry points and its internals, which walk and tidy free lists
_ALLOCATOR = frozenset(
    {
        "malloc", "free", "calloc", "realloc", "reallocarray", "cfree", "memalign",
        "posix_memalign", "aligned_alloc", "valloc", "pvalloc", "_mid_memalign",
        "_int_malloc", "_int_free", "_int_realloc", "_int_memalign", "unlink_chunk",
        "malloc_consolidate", "sysmalloc", "systrim", "heap_trim", "alloc_perturb",
        "free_perturb", "tcache_init", "tcache_get", "tcache_put", "arena_get2",
        "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
        "__libc_memalign", "__malloc_arena_thread_freeres",
    }
)  # fmt: skip


def is_allocator(key: str) -> bool:
    """Whether the function (a :func:`function_key`) is glibc's allocator's (``malloc``,
    ``_int_malloc``, ``unlink_chunk``, ...): what it counts for one allocation depends on
    the state of the heap's free lists, so on the process's past, not only on the code."""
    match = _LIBC.match(key)
    return match is not None and _CLONE.sub("", match.group(1)) in _ALLOCATOR


def allocator_instructions(functions: Mapping[str, int]) -> int:
    """The instructions glibc's allocator's functions counted."""
    return sum(value for key, value in functions.items() if is_allocator(key))


def describe_function(key: str) -> str:
    """The key, with the torch operator its code belongs to where the name says so, and
    what interpreter and allocator functions stand for."""
    notes = []
    op = _OP.search(key)
    if op:
        notes.append(f"aten::{op.group(1)}")
    if is_interpreter(key):
        notes.append("Python interpreter")
    if is_allocator(key):
        notes.append("glibc allocator")
    return f"{key} [{'; '.join(notes)}]" if notes else key


def parse(text: str) -> Dump:
    """The instructions counted in one Callgrind output file."""
    names: dict[str, dict[str, str]] = {"fn": {}, "ob": {}}
    trigger, events, summary = "", None, None
    functions: dict[str, int] = {}
    current_fn, current_ob, key = "", "", None
    after_call = False
    for line in text.splitlines():
        if not line:
            continue
        first = line[0]
        if first.isdigit() or first in "+-*":
            if after_call:
                after_call = False
                continue
            parts = line.split()
            if len(parts) > 1 and key is not None:
                functions[key] = functions.get(key, 0) + int(parts[1])
            continue
        kind, _, value = line.partition("=")
        if kind in ("fn", "ob", "cfn", "cob"):
            table = names[kind[-2:]]
            match = _NAMED.match(value)
            if match:
                ident, given = match.groups()
                if given is not None:
                    table[ident] = given
                value = table.get(ident, given or "")
            if kind == "ob":
                current_ob = value
            elif kind == "fn":
                current_fn = value
                key = function_key(current_fn, current_ob)
        elif kind == "calls":
            after_call = True
        elif line.startswith("events:"):
            events = line.split(":", 1)[1].split()
        elif line.startswith(("summary:", "totals:")):
            # the header's summary can be wrong (seen: half the calls' instructions right
            # after instrumentation was switched on); the totals at the end add up the
            # cost lines, so they win where both are given
            if summary is None or line.startswith("totals:"):
                summary = int(line.split(":", 1)[1].split()[0])
        elif line.startswith("desc: Trigger:"):
            trigger = line.split(":", 2)[2].strip()
    if events is None or events[:1] != ["Ir"] or summary is None:
        raise CallgrindOutputError("not a Callgrind output of instructions (events: Ir)")
    return Dump(trigger, summary, functions)


def read(path: Path) -> Dump:
    return parse(path.read_text(encoding="utf-8", errors="replace"))


def top_functions(functions: Mapping[str, int], count: int = KEPT_FUNCTIONS) -> dict[str, int]:
    """The ``count`` functions that counted most, largest first."""
    ranked = sorted(functions.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:count])


@dataclass(frozen=True)
class Growth:
    """How one function's own count changed between a baseline and now (per call)."""

    function: str
    before: int | None  # None: not among the baseline's kept functions
    now: int

    @property
    def change(self) -> int:
        return self.now - (self.before or 0)


def grew_most(
    before: Mapping[str, int],
    now: Mapping[str, int],
    count: int = 5,
    allocator_noise: float = 0.0,
) -> list[Growth]:
    """The ``count`` functions whose own counts grew most from ``before`` to ``now``.

    An allocator function (:func:`is_allocator`) is ranked, and named at all, only by
    what it grew beyond ``allocator_noise`` of the allocator's whole baseline count (0.05:
    a twentieth of it), what the heap's state alone moves it by (and moves between its
    functions, ``_int_malloc`` to ``unlink_chunk``): a regression names the code that
    grew, not the free lists it happened to find."""
    floor = min(before.values()) if len(before) >= KEPT_FUNCTIONS else 0
    noise = round(allocator_noise * allocator_instructions(before))

    def beyond(growth: Growth) -> int:
        # a function the baseline did not keep counted at most ``floor`` then: its
        # growth is at least ``now - floor``, ranked by that, never by an invented figure
        was = floor if growth.before is None else growth.before
        return growth.now - was - (noise if is_allocator(growth.function) else 0)

    growths: Iterable[Growth] = (
        Growth(name, before.get(name), value)
        for name, value in now.items()
        if value - before.get(name, 0) > 0
    )
    ranked = sorted((g for g in growths if beyond(g) > 0), key=lambda g: -beyond(g))
    return ranked[:count]
