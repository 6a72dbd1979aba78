"""pytest-torch-core: the shared core of the pytest-torch plugin family.

Public names: :func:`assert_close` and :class:`TensorMismatchError` (tensor comparison
with mismatch details), :func:`hardware_fingerprint`. The device layer lives in
:mod:`pytest_torch.core.devices`. Names are imported on first use, so loading the
plugin stays cheap; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import exports_of, lazy_exports

if TYPE_CHECKING:
    from pytest_torch.core.compare import Mismatch, TensorMismatchError, assert_close
    from pytest_torch.core.fingerprint import HardwareFingerprint, hardware_fingerprint
    from pytest_torch.core.memory import PeakMemory, PeakTracker

_EXPORTS = exports_of("core")

__all__ = [
    "HardwareFingerprint",
    "Mismatch",
    "PeakMemory",
    "PeakTracker",
    "TensorMismatchError",
    "assert_close",
    "hardware_fingerprint",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
