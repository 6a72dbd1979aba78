"""The memory options of a session, read and checked once at start-up
(``options.read_settings``) and never changed, kept in ``config.stash[settings_key]``;
what the session's reports carry back is in ``results``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_torch.memory.leak_parameters import LeakCheck


@dataclass(frozen=True)
class MemorySettings:
    """The memory options of a session."""

    #: run the leak check on every test (--torch-leak-check)
    leak_all: bool
    #: the leak check of a test whose marker does not say otherwise
    leak_defaults: LeakCheck
    #: measure every test body's peak (--torch-memory-report)
    report_all: bool
    #: tests per device in the end-of-run table
    top: int


settings_key = pytest.StashKey[MemorySettings]()
