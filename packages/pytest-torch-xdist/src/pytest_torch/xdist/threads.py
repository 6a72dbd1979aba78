"""CPU thread shares: how many threads each test process should give torch.

Without a plan, every xdist worker starts one intra-op thread per core, and N workers
on N cores run N² threads that mostly wait for each other. The plan gives each worker
its share of the cores this process may use (its CPU affinity, not the machine's
count). Nothing here imports torch: the environment is set before torch is imported,
and torch's setters are called only when torch is already loaded.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from pytest_torch.core.cpus import overrun
from pytest_torch.xdist.markers import THREADS
from pytest_torch.xdist.options import NUM_THREADS

#: variables that size the thread pools of OpenMP and MKL (and so torch's default)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREADS_MARKER = THREADS.name


class Plan(NamedTuple):
    """The thread count one process will use, and why."""

    #: threads for torch, or None to leave torch alone
    threads: int | None
    cores: int
    #: a short reason shown in the header when threads is None
    reason: str = ""

    def describe(self) -> str:
        if self.threads is None:
            return self.reason
        return f"{self.threads} of {self.cores} threads"


def user_variables(environ: Mapping[str, str]) -> list[str]:
    return [name for name in THREAD_VARIABLES if environ.get(name)]


def plan(setting: str | int, workers: int, cores: int, environ: Mapping[str, str]) -> Plan:
    """What one of ``workers`` processes (0: no xdist) should use on ``cores`` cores."""
    chosen = user_variables(environ)
    if chosen:
        values = ", ".join(f"{name}={environ[name]}" for name in chosen)
        return Plan(None, cores, f"threads left to {values}")
    if setting == "none":
        return Plan(None, cores, f"torch's default threads ({NUM_THREADS}=none)")
    if isinstance(setting, int):
        return Plan(setting, cores)
    if workers <= 1:
        return Plan(None, cores, "torch's default threads (no xdist workers)")
    return Plan(max(1, cores // workers), cores)


def oversubscription(setting: str | int, workers: int, cores: int) -> str | None:
    """A warning when a fixed count gives the processes more threads than cores."""
    if not isinstance(setting, int):
        return None
    how = overrun(setting, workers, cores)
    if how is None:
        return None
    return (
        f"{NUM_THREADS}={setting}: {how}; oversubscribed threads wait for each other"
        f" and can slow tests down by far more than they gain. Use {NUM_THREADS}=auto"
        f" to share the cores."
    )


class Applied:
    """What :func:`apply` changed, so :meth:`undo` can put it back."""

    def __init__(self, *, interop: bool = False) -> None:
        self.interop = interop
        self.environ: dict[str, str | None] = {}
        self.torch_threads: int | None = None
        self.pending: int | None = None

    def undo(self) -> None:
        for name, value in self.environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.environ = {}
        torch = sys.modules.get("torch")
        if torch is not None and self.torch_threads is not None:
            torch.set_num_threads(self.torch_threads)
        self.torch_threads = None
        self.pending = None


def apply(threads: int, *, interop: bool = False) -> Applied:
    """Give this process ``threads`` threads: the environment now (for torch when it is
    imported later, and for subprocesses), torch itself if it is already loaded.

    ``interop`` also sizes torch's inter-op pool, which a process can do once and never
    undo: right for an xdist worker, which lives for one run; wrong for a process that
    may run pytest again (an IDE, pytester), so off by default.
    """
    applied = Applied(interop=interop)
    for name in THREAD_VARIABLES:
        applied.environ[name] = os.environ.get(name)
        os.environ[name] = str(threads)
    applied.pending = threads
    sync_torch(applied)
    return applied


def sync_torch(applied: Applied) -> None:
    """Call torch's setters once torch is loaded (cheap to call before every test)."""
    if applied.pending is None:
        return
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        return
    threads, applied.pending = applied.pending, None
    if torch.get_num_threads() != threads:
        applied.torch_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    if applied.interop:
        with contextlib.suppress(RuntimeError):  # possible only before the pool starts
            torch.set_num_interop_threads(threads)


def pinned_count(args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> int:
    """The thread count of a ``torch_threads`` marker with these arguments; a
    ValueError naming ``where`` (the test id) and what was expected otherwise."""
    prefix = f"{where}: @pytest.mark.{THREADS_MARKER}"
    count = THREADS.bind(args, kwargs, prefix)["n"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        got = "none" if count is None else repr(count)
        raise ValueError(
            f"{prefix} needs a positive thread count, got {got}. Example: {THREADS.example}"
        )
    return count


def pin(count: int) -> int:
    """Give torch ``count`` intra-op threads for one test; returns the count to put
    back with :func:`unpin`. Imports torch: the test asked for torch threads."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    return before


def unpin(before: int) -> None:
    """Put back the count :func:`pin` returned."""
    import torch

    torch.set_num_threads(before)
