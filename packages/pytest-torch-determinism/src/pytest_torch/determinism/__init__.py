"""pytest-torch-determinism: determinism checks that say why.

Public names: :func:`assert_deterministic`, :func:`diagnose_nondeterminism`,
:class:`Diagnosis`, :class:`NondeterminismError`, :class:`CannotCompare`,
:class:`InputsChangedWarning`. Imported on first use; nothing here
imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import exports_of, lazy_exports

if TYPE_CHECKING:
    from pytest_torch.determinism.assertion import (
        InputsChangedWarning,
        NondeterminismError,
        assert_deterministic,
    )
    from pytest_torch.determinism.diagnosis import Diagnosis, diagnose_nondeterminism
    from pytest_torch.determinism.outputs import CannotCompare

_EXPORTS = exports_of("determinism")

__all__ = [
    "CannotCompare",
    "Diagnosis",
    "InputsChangedWarning",
    "NondeterminismError",
    "assert_deterministic",
    "diagnose_nondeterminism",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
