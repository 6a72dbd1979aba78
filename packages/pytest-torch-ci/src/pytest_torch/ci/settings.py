"""The CI options of a session as resolved at start-up, kept in
``config.stash[settings_key]``."""

from __future__ import annotations

from pathlib import Path

import pytest


class CiSettings:
    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, artifacts: Path | None, root: Path) -> None:
        self.artifacts = artifacts
        self.root = root


settings_key = pytest.StashKey[CiSettings]()
