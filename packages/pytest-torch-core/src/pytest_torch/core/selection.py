"""Which device types a test runs on: the ``--torch-device`` selection, the
``torch_devices`` marker, and the reason a test is skipped for want of a device.

These rules, for core and its siblings (perf and memory ask here instead of importing
core's plugin). Nothing here imports torch at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import devices
from pytest_torch.core.markers import DEVICES, definition_of
from pytest_torch.core.settings import get_settings

if TYPE_CHECKING:
    from pytest_torch.core.settings import CoreSettings

MARKER = DEVICES.name


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
    marker = DEVICES.mark_on(item)
    return None if marker is None else marker_device_types(marker, definition_of(item).nodeid)


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
