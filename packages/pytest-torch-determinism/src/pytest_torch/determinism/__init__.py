"""pytest-torch-determinism: determinism checks that say why.

Its public names are the imports under ``TYPE_CHECKING`` below, each imported on first
use; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import package_exports

if TYPE_CHECKING:
    from pytest_torch.determinism.assertion import InputsChangedWarning as InputsChangedWarning
    from pytest_torch.determinism.assertion import NondeterminismError as NondeterminismError
    from pytest_torch.determinism.assertion import assert_deterministic as assert_deterministic
    from pytest_torch.determinism.diagnosis import Diagnosis as Diagnosis
    from pytest_torch.determinism.diagnosis import (
        diagnose_nondeterminism as diagnose_nondeterminism,
    )
    from pytest_torch.determinism.outputs import CannotCompare as CannotCompare

__getattr__, __dir__ = package_exports(__name__, __file__)
