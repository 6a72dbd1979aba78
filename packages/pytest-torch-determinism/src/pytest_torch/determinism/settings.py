"""The determinism options of a session, read once at start-up and never changed, kept
in ``config.stash[settings_key]``; what the plugin does with them during the session
is in ``state``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class DeterminismSettings:
    """The determinism options of a session."""

    #: deterministic mode for every test that uses torch_seed (--torch-deterministic)
    enabled: bool
    #: ops without a deterministic implementation warn instead of raising
    warn_only: bool


settings_key = pytest.StashKey[DeterminismSettings]()
