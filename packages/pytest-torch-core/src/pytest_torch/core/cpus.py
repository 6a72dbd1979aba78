"""The host CPU: its model name, the cores this process may use, and thread counts
that overrun them.

Shared by the hardware fingerprint and the device layer (the CPU's name), and by the
plugins that choose thread counts (xdist's shares per worker, perf's thread count for
measurements). Nothing here imports torch.
"""

from __future__ import annotations

import functools
import os
import platform
import re


def normalise_spaces(text: str) -> str:
    """``text`` with each run of white space made one space, and trimmed."""
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def cpu_model() -> str:
    """The CPU's brand string, as py-cpuinfo reports it.

    On Linux the brand is read straight from /proc/cpuinfo (where py-cpuinfo reads it
    too), which avoids py-cpuinfo's second of start-up; elsewhere py-cpuinfo answers.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() == "model name" and value.strip():
                    return normalise_spaces(value)
    except OSError:
        pass
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
        brand = info.get("brand_raw") or info.get("brand") or ""
    except Exception:
        brand = ""
    return (
        normalise_spaces(str(brand)) or normalise_spaces(platform.processor()) or platform.machine()
    )


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
