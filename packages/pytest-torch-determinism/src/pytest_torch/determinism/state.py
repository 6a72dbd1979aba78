"""What the determinism plugin did during a session, kept in
``config.stash[session_key]``: the ``CUBLAS_WORKSPACE_CONFIG`` it set (to remove at
the end) and the header's line about it, and the tests deterministic mode was applied to.
"""

from __future__ import annotations

import pytest


class DeterminismSession:
    """What the plugin did during a session."""

    def __init__(self) -> None:
        #: whether the plugin set CUBLAS_WORKSPACE_CONFIG (and removes it at the end)
        self.cublas_set = False
        #: the header's line about CUBLAS_WORKSPACE_CONFIG
        self.cublas_line: str | None = None
        #: tests set up in this run, and those deterministic mode was applied to (the
        #: controller counts its workers' reports under xdist)
        self.tests = 0
        self.applied = 0


session_key = pytest.StashKey[DeterminismSession]()
