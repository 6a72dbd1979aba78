"""pytest-torch-core: the shared core of the pytest-torch plugin family.

Its public names are the imports under ``TYPE_CHECKING`` below: tensor comparison with
mismatch details, the hardware fingerprint, peak-memory tracking. The device layer lives
in :mod:`pytest_torch.core.devices`. Names are imported on first use, so loading the
plugin stays cheap; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import package_exports

if TYPE_CHECKING:
    from pytest_torch.core.compare import Mismatch as Mismatch
    from pytest_torch.core.compare import TensorMismatchError as TensorMismatchError
    from pytest_torch.core.compare import assert_close as assert_close
    from pytest_torch.core.fingerprint import HardwareFingerprint as HardwareFingerprint
    from pytest_torch.core.fingerprint import hardware_fingerprint as hardware_fingerprint
    from pytest_torch.core.peaks import PeakMemory as PeakMemory
    from pytest_torch.core.peaks import PeakTracker as PeakTracker

__getattr__, __dir__ = package_exports(__name__, __file__)
