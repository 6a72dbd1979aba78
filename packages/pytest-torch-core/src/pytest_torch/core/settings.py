"""The core options of a session as resolved at start-up and never changed, kept in
``config.stash`` for core and its siblings (perf and memory ask here instead of
importing core's plugin); what the session learns while it runs is in ``state``.
Nothing here imports torch at load time.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class CoreSettings:
    """The core options as resolved at start-up."""

    #: the device types asked for, or None for "every available one"
    device_types: tuple[str, ...] | None
    #: where the device selection came from (the flag, or the ini name and file)
    device_source: str
    base_seed: int


settings_key = pytest.StashKey[CoreSettings]()


def get_settings(config: pytest.Config) -> CoreSettings:
    """The core settings of a session (for sibling plugins)."""
    return config.stash[settings_key]
