"""Which device types a test runs on: the ``--torch-device`` selection, the
``torch_devices`` marker, and the reason a test is skipped for want of a device.

The core plugin's settings and these rules, for core and its siblings (perf and memory
ask here instead of importing core's plugin). Nothing here imports torch at load time.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_torch.core import devices
from pytest_torch.core.markers import MarkerSpec

DEVICES = MarkerSpec(
    "torch_devices",
    "run this test only on these device types (cpu, cuda, xpu, mps); where none of them is"
    " available it is skipped with the reason.",
    variadic="types",
    example='@pytest.mark.torch_devices("cuda", "xpu")',
)
MARKER = DEVICES.name


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


def marker_device_types(marker: pytest.Mark, node_id: str) -> list[str]:
    """The device types named by a torch_devices marker; ValueError when malformed."""
    if marker.kwargs:
        raise ValueError(
            f"{node_id}: @pytest.mark.{MARKER} takes device types as positional"
            f" arguments, got keyword(s) {', '.join(sorted(marker.kwargs))}."
            f' Example: @pytest.mark.{MARKER}("cuda", "xpu")'
        )
    names: list[Any] = []
    for arg in marker.args:
        names.extend(arg if isinstance(arg, (list, tuple)) else [arg])
    if not names or not all(isinstance(name, str) for name in names):
        raise ValueError(
            f"{node_id}: @pytest.mark.{MARKER} needs one or more device type names"
            f" ({', '.join(devices.KNOWN_DEVICE_TYPES)}), got {marker.args!r}."
            f' Example: @pytest.mark.{MARKER}("cuda")'
        )
    parsed = devices.parse_device_types(names, source=f"{node_id}: @pytest.mark.{MARKER}")
    if parsed is None:  # "all": no restriction
        return list(devices.device_types())
    return parsed


def restriction(item: pytest.Item | pytest.Metafunc) -> list[str] | None:
    node = item.definition if isinstance(item, pytest.Metafunc) else item
    marker = node.get_closest_marker(MARKER)
    return None if marker is None else marker_device_types(marker, node.nodeid)


def device_types_for(config: pytest.Config, node: pytest.Item | pytest.Metafunc) -> list[str]:
    """The device types a test runs on: the --torch-device selection, narrowed by its
    ``torch_devices`` marker (for sibling plugins that parametrize by device)."""
    selected = get_settings(config).selected()
    wanted = restriction(node)
    return selected if wanted is None else [t for t in selected if t in wanted]


def skip_reason(wanted: list[str], settings: CoreSettings) -> str:
    available = settings.available()
    present = [t for t in wanted if t in available]
    if present:
        return (
            f"needs {' or '.join(wanted)}; {', '.join(present)} not selected by"
            f" {settings.device_source}"
        )
    return (
        f"needs {' or '.join(wanted)}; not available on this machine"
        f" (available: {', '.join(available)})"
    )
