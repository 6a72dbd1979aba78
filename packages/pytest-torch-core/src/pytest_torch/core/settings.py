"""The core options of a session as resolved at start-up, kept in ``config.stash`` for
core and its siblings (perf and memory ask here instead of importing core's plugin).
Nothing here imports torch at load time.
"""

from __future__ import annotations

import pytest

from pytest_torch.core import devices
from pytest_torch.core.reach import Reach


class CoreSettings:
    """The core options as resolved at start-up."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, device_types: list[str] | None, device_source: str, base_seed: int) -> None:
        #: the device types asked for, or None for "every available one"
        self.device_types = device_types
        self.device_source = device_source
        self.base_seed = base_seed
        self._available: list[str] | None = None
        #: whether any collected test carries a torch_devices marker
        self.restrictions_seen = False
        #: which tests each check acted on (see ``reach``)
        self.reach = Reach()

    def available(self) -> list[str]:
        """Available device types (imports torch on first use)."""
        if self._available is None:
            self._available = devices.available_device_types()
        return self._available

    def selected(self) -> list[str]:
        """The device types ``torch_device`` runs tests on."""
        available = self.available()
        if self.device_types is None:
            return available
        return [t for t in self.device_types if t in available]


settings_key = pytest.StashKey[CoreSettings]()


def get_settings(config: pytest.Config) -> CoreSettings:
    """The core settings of a session (for sibling plugins)."""
    return config.stash[settings_key]
