"""Which device types a test runs on: the ``--torch-device`` selection, the
``torch_devices`` marker, the ``torch_device`` parameters, and the reason a test is
skipped for want of a device.

These rules, for core and its siblings (perf and memory ask here instead of importing
core's plugin). Nothing here imports torch at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import devices
from pytest_torch.core.markers import DEVICES, definition_of
from pytest_torch.core.state import get_session

if TYPE_CHECKING:
    from pytest_torch.core.state import CoreSession

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
    selected = get_session(config).selected()
    wanted = restriction(node)
    return selected if wanted is None else [t for t in selected if t in wanted]


def skip_reason(wanted: list[str], session: CoreSession) -> str:
    available = session.available()
    present = [t for t in wanted if t in available]
    if present:
        return (
            f"needs {' or '.join(wanted)}; {', '.join(present)} not selected by"
            f" {session.settings.device_source}"
        )
    return (
        f"needs {' or '.join(wanted)}; not available on this machine"
        f" (available: {', '.join(available)})"
    )


def unavailable(session: CoreSession) -> str | None:
    """The usage error for accelerator types asked for that this machine lacks."""
    asked = session.settings.device_types or ()
    if not any(t != "cpu" for t in asked):
        return None
    missing = [t for t in asked if t not in session.available()]
    if not missing:
        return None
    return (
        f"{session.settings.device_source}: {', '.join(missing)} asked for but not"
        f" available on this machine (available: {', '.join(session.available())}). Drop it"
        f" from the list, or leave the option out to use every available device."
    )


def parametrized_by_test(metafunc: pytest.Metafunc) -> bool:
    """Whether the test parametrizes ``torch_device`` itself."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if "torch_device" in names:
            return True
    return False


def device_parameters(session: CoreSession, wanted: list[str] | None) -> list[Any]:
    """The ``torch_device`` parameters of a test (``wanted``: its marker's device
    types): one per selected type it may run on, each id'd by its type; where it may run
    on none of them, one skipped parameter per type it wants, saying why."""
    selected = session.selected()
    if wanted is None:
        return [pytest.param(t, id=t) for t in selected]
    runnable = [t for t in selected if t in wanted]
    if runnable:
        return [pytest.param(t, id=t) for t in runnable]
    reason = skip_reason(wanted, session)
    return [pytest.param(t, id=t, marks=pytest.mark.skip(reason=reason)) for t in wanted]
