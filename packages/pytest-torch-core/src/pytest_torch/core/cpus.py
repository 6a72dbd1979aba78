"""The CPU cores this process may use, and thread counts that overrun them.

Shared by the plugins that choose thread counts (xdist's shares per worker, perf's
thread count for measurements). Nothing here imports torch.
"""

from __future__ import annotations

import os


def available_cores() -> int:
    """Cores this process may run on (its affinity where the OS reports one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if callable(affinity):
        try:
            return max(1, len(affinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def overrun(threads: int, processes: int, cores: int) -> str | None:
    """How ``processes`` processes of ``threads`` threads each overrun ``cores`` (for
    example "2 workers x 4 threads = 8 threads on 4 available cores"); None when
    they fit."""
    processes = max(1, processes)
    total = threads * processes
    if total <= cores:
        return None
    if processes == 1:
        return f"{threads} threads on {cores} available core{'s' if cores != 1 else ''}"
    return (
        f"{processes} workers x {threads} thread{'s' if threads != 1 else ''} = {total}"
        f" threads on {cores} available core{'s' if cores != 1 else ''}"
    )
