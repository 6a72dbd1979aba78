"""pytest-torch-core: the shared core of the pytest-torch plugin family.

Public names: :func:`assert_close` and :class:`TensorMismatchError` (tensor comparison
with mismatch details), :func:`hardware_fingerprint`. The device layer lives in
:mod:`pytest_torch.core.devices`. Importing this package does not import torch.
"""

from pytest_torch.core.compare import Mismatch, TensorMismatchError, assert_close
from pytest_torch.core.fingerprint import HardwareFingerprint, hardware_fingerprint

__all__ = [
    "HardwareFingerprint",
    "Mismatch",
    "TensorMismatchError",
    "assert_close",
    "hardware_fingerprint",
]
