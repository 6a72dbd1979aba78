"""pytest-torch-determinism: determinism checks that say why.

Public names: :func:`assert_deterministic`, :func:`diagnose_nondeterminism`,
:class:`Diagnosis`, :class:`NondeterminismError`. Imported on first use; nothing here
imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import lazy_exports

if TYPE_CHECKING:
    from pytest_torch.determinism.assertion import NondeterminismError, assert_deterministic
    from pytest_torch.determinism.diagnosis import Diagnosis, diagnose_nondeterminism

_EXPORTS = {
    "Diagnosis": "pytest_torch.determinism.diagnosis",
    "NondeterminismError": "pytest_torch.determinism.assertion",
    "assert_deterministic": "pytest_torch.determinism.assertion",
    "diagnose_nondeterminism": "pytest_torch.determinism.diagnosis",
}

__all__ = [
    "Diagnosis",
    "NondeterminismError",
    "assert_deterministic",
    "diagnose_nondeterminism",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
