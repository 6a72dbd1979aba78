"""The determinism options of a session and what the plugin did with them, kept in
``config.stash[settings_key]``."""

from __future__ import annotations

import pytest


class DeterminismSettings:
    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, enabled: bool, warn_only: bool) -> None:
        self.enabled = enabled
        self.warn_only = warn_only
        #: whether the plugin set CUBLAS_WORKSPACE_CONFIG (and removes it at the end)
        self.cublas_set = False
        #: the header's line about CUBLAS_WORKSPACE_CONFIG
        self.cublas_line: str | None = None
        #: tests set up in this run, and those deterministic mode was applied to (the
        #: controller counts its workers' reports under xdist)
        self.tests = 0
        self.applied = 0


settings_key = pytest.StashKey[DeterminismSettings]()
