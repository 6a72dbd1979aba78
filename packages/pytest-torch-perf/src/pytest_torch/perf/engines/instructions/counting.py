"""Counting the instructions of one call under Callgrind (``--torch-perf-measure=instructions``).

The session runs under Valgrind (``engines.instructions.valgrind``). A count switches Callgrind's
instrumentation on, warms the call up (the first calls of a call site on Python 3.11
count about 5 % more: the interpreter specialises its bytecode), then counts each of
several calls on its own and keeps, of each kind of noise, what is typical of the call
(``typical``). One intra-op thread, whatever else is set: a second thread makes counts
depend on how threads interleave (+42 to +143 %, 22 to 70 % apart between runs).

glibc's allocator counts what the heap's free lists make it count: the same
allocations walk and split other chunks after other earlier work, so one call can count
20 % more when glibc tidies its free lists during it, and another less when it finds
chunks of the right sizes (``_int_malloc``, ``unlink_chunk``). So the allocator's part
is the median of the calls', neither a lucky call nor a tidying one. A process whose
heap holds such chunks throughout counts every call's allocations for less, which no
statistic of its calls undoes (settling the heap before each call, ``malloc_trim(0)``,
made it worse: the allocator's part then moved 6 to 8 % between sessions instead of
2 %), so the allocator's part is also allowed for when counts are compared
(``rule.ALLOCATOR_ALLOWANCE``): it is kept with each count.

Python code's counts also depend on the interpreter's attribute cache: a lookup whose
entry collides with another's misses every time and walks the class hierarchy, and
which entries collide depends on the version numbers classes were given, so on what the
process did before. One process in four or five counted a small model's steps 1.2 %
higher for that. So each counted call runs in a cache of its own: emptied, with the
version numbers moved on by a different amount, and filled by one uncounted call first;
the smallest count of the rest of each call is the one with the fewest such collisions.
Collisions between two names of one class depend on the names' addresses alone, which
no version number moves, so what remains is allowed for when counts are compared
(``rule.INTERPRETER_ALLOWANCE``): the interpreter's part of each count is kept with it.
"""

from __future__ import annotations

import gc
import itertools
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_torch.perf.calls import bind, run_context, torch_threads
from pytest_torch.perf.engines.instructions import callgrind_output, client_requests
from pytest_torch.perf.engines.instructions.valgrind import session
from pytest_torch.perf.options import MEASURE

#: calls before counting, and calls counted (see ``typical``)
WARMUPS = 2
REPEATS = 5
#: calls counted of a long call (``LONG_CALL_S``)
LONG_REPEATS = 3
#: a call whose second run took longer than this (instrumented, CPU time: a busy machine
#: does not make a call long, nor does compiling it in the first) is counted 3 times
LONG_CALL_S = 2.0
_dumps = itertools.count()


class InstructionsUnavailable(Exception):
    """This process cannot count instructions; the message says why and what to do."""


@dataclass
class Counted:
    """The instructions of one call (``typical`` of its ``repeats`` counts), and the
    functions that counted most in it (their own counts)."""

    instructions: int
    repeats: list[int]
    warmups: int
    functions: dict[str, int] = field(default_factory=dict)
    #: of ``instructions``, those the Python interpreter's own functions counted
    interpreter: int = 0
    #: of ``instructions``, those glibc's allocator's functions counted
    allocator: int = 0

    @property
    def spread(self) -> float:
        """(largest - smallest) / smallest of the counts."""
        low = min(self.repeats)
        return (max(self.repeats) - low) / low if low else 0.0


def fmt_count(count: float) -> str:
    """2025376 -> "2,025,376 instr" (every digit: a 1 % change must show)."""
    return f"{count:,.0f} instr"


def count_key(valgrind_version: str) -> str:
    """What an instruction count depends on besides the code: torch, Python, Valgrind,
    and the CPU kernels torch picked under Valgrind (its CPU capability)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    return (
        f"torch={torch.__version__} python={platform.python_version()}"
        f" valgrind={valgrind_version} cpu={platform.machine()}/{capability}"
    )


def parse_key(key: str) -> dict[str, str]:
    """``torch=2.13.0 python=...`` -> {"torch": "2.13.0", ...}."""
    return dict(part.partition("=")[::2] for part in key.split())


def _dump_folder() -> tuple[str, Path]:
    found = session()
    if found is None or not client_requests.running_on_valgrind():
        raise InstructionsUnavailable(
            "this process does not run under the plugin's Valgrind session, so it cannot"
            f" count instructions. Start pytest itself with {MEASURE}=instructions"
            " (not under valgrind by hand): the plugin runs the session under Valgrind"
        )
    return found


def _take_dump(folder: Path, tag: str) -> callgrind_output.Dump:
    """Write Callgrind's counts since the last dump, read them, and remove the file."""
    import os

    reason = f"pytest-torch {os.getpid()} {tag}"
    client_requests.dump_stats(reason)
    files = sorted(
        folder.glob(f"callgrind.{os.getpid()}.*"),
        key=lambda path: int(path.suffix[1:]) if path.suffix[1:].isdigit() else -1,
    )
    for path in reversed(files):
        dump = callgrind_output.read(path)
        path.unlink()
        if dump.trigger.endswith(reason):
            return dump
    raise InstructionsUnavailable(
        f"Callgrind wrote no counts into {folder} for this call (is the folder writable?)"
    )


#: how far each counted call moves the classes' version numbers on from the last
_VERSION_STEP = 97


def _new_attribute_cache(index: int) -> None:
    """Empty the interpreter's attribute cache and use up ``index * _VERSION_STEP``
    version numbers, so the next calls give classes other numbers, which collide in
    other places (see the module's docstring)."""
    # also drops every class's version number (3.13 renamed it, deprecating the old name)
    clear = getattr(sys, "_clear_internal_caches", None) or sys._clear_type_cache
    clear()
    holder: type = type("_VersionNumbers", (), {})
    for step in range(index * _VERSION_STEP):
        if step % 500 == 0:  # Python 3.12+ gives one class at most 1,000 numbers
            holder = type("_VersionNumbers", (), {})
        holder.number = step  # type: ignore[attr-defined]  # the class changes: number dropped
        _ = holder.number  # type: ignore[attr-defined]  # looked up: a new number given


def typical(dumps: list[callgrind_output.Dump]) -> Counted:
    """One figure from the counted calls, each noise by its own statistic: the smallest
    count of everything but glibc's allocator (attribute-cache collisions only ever add
    to a call, so the smallest has the fewest), plus the median of the allocator's
    parts (the heap's state moves them both ways: the smallest would be a lucky call).
    The functions are those of the call with the smallest rest."""
    heaps = [callgrind_output.allocator_instructions(dump.functions) for dump in dumps]
    rests = [dump.instructions - heap for dump, heap in zip(dumps, heaps, strict=True)]
    chosen = dumps[rests.index(min(rests))]
    heap = sorted(heaps)[(len(heaps) - 1) // 2]  # the lower middle one of an even number
    return Counted(
        instructions=min(rests) + heap,
        repeats=[dump.instructions for dump in dumps],
        warmups=WARMUPS,
        functions=callgrind_output.top_functions(chosen.functions),
        interpreter=callgrind_output.interpreter_instructions(chosen.functions),
        allocator=heap,
    )


def count_call(run: Callable[[], Any]) -> Counted:
    """Count ``run()`` (already bound to its inputs, in its thread count and mode)."""
    _, folder = _dump_folder()
    enabled = gc.isenabled()
    client_requests.start_instrumentation()
    try:
        # the warm-up calls (WARMUPS): a torch.compile'd call compiles in the first, so
        # the second tells whether the call is long
        result = run()
        del result
        started = time.process_time()
        result = run()
        del result
        long = time.process_time() - started > LONG_CALL_S
        repeats = LONG_REPEATS if long else REPEATS
        gc.collect()
        gc.disable()  # a collection inside a counted call is not the call's work
        dumps = []
        for index in range(repeats):
            if not long:  # a long call is the kernels': the cache is noise there
                _new_attribute_cache(index)
                result = run()
                del result
            tag = str(next(_dumps))
            client_requests.toggle_collect()
            result = run()
            client_requests.toggle_collect()
            del result  # freed outside the count, as the warm-up calls' results were
            dumps.append(_take_dump(folder, tag))
    finally:
        if enabled:
            gc.enable()
        client_requests.stop_instrumentation()
    return typical(dumps)


def count_instructions(target: Any, *inputs: Any, **kwargs: Any) -> Counted:
    """Count ``target(*inputs, **kwargs)``: modules in inference mode, callables as
    given, on one intra-op thread (restored after)."""
    run = bind(target, inputs, kwargs)
    with torch_threads(1), run_context(target):
        return count_call(run)
