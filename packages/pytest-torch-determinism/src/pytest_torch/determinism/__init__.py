"""pytest-torch-determinism: determinism checks that say why.

Its public names are ``EXPORTS`` below (name -> module; the same imports under
``TYPE_CHECKING`` are for type checkers), each imported on first use, so importing the
package is cheap and never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.exports import lazy_names

if TYPE_CHECKING:
    from pytest_torch.determinism.assertion import InputsChangedWarning as InputsChangedWarning
    from pytest_torch.determinism.assertion import NondeterminismError as NondeterminismError
    from pytest_torch.determinism.assertion import assert_deterministic as assert_deterministic
    from pytest_torch.determinism.diagnosis import Diagnosis as Diagnosis
    from pytest_torch.determinism.diagnosis import (
        diagnose_nondeterminism as diagnose_nondeterminism,
    )
    from pytest_torch.determinism.outputs import CannotCompare as CannotCompare

#: public name -> the module that defines it, imported on first use
EXPORTS = {
    "InputsChangedWarning": "pytest_torch.determinism.assertion",
    "NondeterminismError": "pytest_torch.determinism.assertion",
    "assert_deterministic": "pytest_torch.determinism.assertion",
    "Diagnosis": "pytest_torch.determinism.diagnosis",
    "diagnose_nondeterminism": "pytest_torch.determinism.diagnosis",
    "CannotCompare": "pytest_torch.determinism.outputs",
}
__all__ = [
    "CannotCompare",
    "Diagnosis",
    "InputsChangedWarning",
    "NondeterminismError",
    "assert_deterministic",
    "diagnose_nondeterminism",
]

__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
