"""The concrete device a test was given, resolved once per device type and session.

A test parametrized by ``torch_device`` (``test_x[cuda]``) runs on the device the
``pytest_torch_resolve_device`` hook names for its device type (``cuda:1`` on an xdist
worker, say). Sibling plugins that time, synchronise or measure a test ask here
(:func:`chosen_device`) instead of guessing the device from the tensors a test hands
them; :func:`resolve_device` gives the same answer for a bare device type (a benchmark
case's). Nothing here imports torch at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import devices

if TYPE_CHECKING:
    import torch

FIXTURE = "torch_device"

#: device type -> the concrete device the hook named for it in this session
_resolved_key: pytest.StashKey[dict[str, torch.device]] = pytest.StashKey()


def resolve_device(config: pytest.Config, device_type: str) -> torch.device:
    """The concrete device ``device_type`` means in this process, as the ``torch_device``
    fixture resolves it: the ``pytest_torch_resolve_device`` hook's answer (the first
    non-None one; core's own answers last with the backend's current device), made a
    ``torch.device``. Asked once per device type and session, then kept in
    ``config.stash``."""
    resolved = config.stash.setdefault(_resolved_key, {})
    device = resolved.get(device_type)
    if device is None:
        device = devices.as_device(
            config.hook.pytest_torch_resolve_device(config=config, device_type=device_type)
        )
        resolved[device_type] = device
    return device


def _device_of(config: pytest.Config, value: Any) -> torch.device | None:
    """A ``torch_device`` value as a device: a device type resolved, a device as is."""
    if isinstance(value, str):
        return resolve_device(config, value)
    import torch

    return value if isinstance(value, torch.device) else None


def chosen_device(item: pytest.Item) -> torch.device | None:
    """The concrete device ``item`` runs on, or None when the test chose none.

    - Once the test is set up and uses ``torch_device``: the device the fixture gave it
      (a conftest that overrides the fixture is honoured).
    - Otherwise, for a test parametrized by ``torch_device``: its device type (the
      parameter, ``"cuda"`` in ``test_x[cuda]``) resolved exactly as the fixture
      resolves it (:func:`resolve_device`, cached per session); a parameter that is
      already a ``torch.device`` is that device.
    - A test not parametrized by ``torch_device``: None (callers then infer the device
      from what the test hands them).
    """
    funcargs = getattr(item, "funcargs", None) or {}
    if FIXTURE in funcargs:
        given = _device_of(item.config, funcargs[FIXTURE])
        if given is not None:
            return given
    callspec = getattr(item, "callspec", None)
    if callspec is None or FIXTURE not in callspec.params:
        return None
    return _device_of(item.config, callspec.params[FIXTURE])
