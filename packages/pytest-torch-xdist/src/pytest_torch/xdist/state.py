"""What this process (controller, worker or plain run) decided and changed at start-up,
kept in ``config.stash[session_key]``: every change :mod:`.workers` makes is recorded
here so that it can be undone. Nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_torch.xdist.settings import XdistSettings

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_torch.xdist import threads
    from pytest_torch.xdist.gpus import Assignment, GpuPlan
    from pytest_torch.xdist.locks import GpuLock


class XdistSession:
    """A session's xdist settings, and what this process decided and changed."""

    def __init__(self, settings: XdistSettings) -> None:
        self.settings = settings
        self.gpus: GpuPlan | None = None
        self.narrow = False  # --torch-xdist-gpus given: each worker sees only its GPU
        #: the memory fraction in force: the option's, a worker's from its assignment,
        #: or the one auto worked out
        self.fraction: float | str | None = settings.fraction
        self.assignments: list[Assignment] = []  # controller: one per worker
        self.assignment: Assignment | None = None  # worker: its own
        self.device: str | None = None  # what the worker's GPU is called in the worker
        #: the current device before the worker made its own device current (a type no
        #: visibility variable narrows), put back at the end
        self.device_before: str | None = None
        self.fraction_device: str | None = None
        #: the fraction in force before ours (torch's default 1.0 unless someone set one)
        self.fraction_before = 1.0
        self.applied: threads.Applied | None = None
        self.plan: threads.Plan | None = None
        self.lock: GpuLock | None = None
        self.lock_dir: Path | None = None
        self.owns_lock_dir = False
        self.warning: str | None = None  # more threads than cores


session_key = pytest.StashKey[XdistSession]()
