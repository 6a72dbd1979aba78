"""What the core plugin learns while a session runs, beside its fixed settings: the
device types available (asked once), whether any test carries a ``torch_devices``
marker, and which tests each check acted on. Kept in ``config.stash[session_key]``.
Nothing here imports torch at load time.
"""

from __future__ import annotations

import pytest

from pytest_torch.core import devices
from pytest_torch.core.reach import Reach
from pytest_torch.core.settings import CoreSettings


class CoreSession:
    """A session's core settings and what it learns while it runs."""

    def __init__(self, settings: CoreSettings) -> None:
        self.settings = settings
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
        if self.settings.device_types is None:
            return available
        return [t for t in self.settings.device_types if t in available]


session_key = pytest.StashKey[CoreSession]()


def get_session(config: pytest.Config) -> CoreSession:
    """The core session state (for sibling plugins)."""
    return config.stash[session_key]
