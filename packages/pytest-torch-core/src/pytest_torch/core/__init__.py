"""pytest-torch-core: the shared core of the pytest-torch plugin family.

Its public names are ``EXPORTS`` below (name -> module; the same imports under
``TYPE_CHECKING`` are for type checkers): tensor comparison with mismatch details, the
hardware fingerprint, peak-memory tracking. The device layer lives in
:mod:`pytest_torch.core.devices`. Names are imported on first use, so loading the plugin
stays cheap; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.exports import lazy_names

if TYPE_CHECKING:
    from pytest_torch.core.compare import Mismatch as Mismatch
    from pytest_torch.core.compare import TensorMismatchError as TensorMismatchError
    from pytest_torch.core.compare import assert_close as assert_close
    from pytest_torch.core.fingerprint import HardwareFingerprint as HardwareFingerprint
    from pytest_torch.core.fingerprint import hardware_fingerprint as hardware_fingerprint
    from pytest_torch.core.peaks import PeakMemory as PeakMemory
    from pytest_torch.core.peaks import PeakTracker as PeakTracker

#: public name -> the module that defines it, imported on first use
EXPORTS = {
    "Mismatch": "pytest_torch.core.compare",
    "TensorMismatchError": "pytest_torch.core.compare",
    "assert_close": "pytest_torch.core.compare",
    "HardwareFingerprint": "pytest_torch.core.fingerprint",
    "hardware_fingerprint": "pytest_torch.core.fingerprint",
    "PeakMemory": "pytest_torch.core.peaks",
    "PeakTracker": "pytest_torch.core.peaks",
}
__all__ = [
    "HardwareFingerprint",
    "Mismatch",
    "PeakMemory",
    "PeakTracker",
    "TensorMismatchError",
    "assert_close",
    "hardware_fingerprint",
]

__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
