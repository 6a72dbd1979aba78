"""pytest-torch-memory: peak-memory budgets and leak checks.

Its public names are ``EXPORTS`` below (name -> module; the same imports under
``TYPE_CHECKING`` are for type checkers), each imported on first use, so importing the
package is cheap and never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.exports import lazy_names

if TYPE_CHECKING:
    from pytest_torch.memory.api import assert_max_memory as assert_max_memory
    from pytest_torch.memory.api import assert_no_memory_leak as assert_no_memory_leak
    from pytest_torch.memory.budgets import MemoryBudgetError as MemoryBudgetError
    from pytest_torch.memory.leaks import MemoryLeakError as MemoryLeakError

#: public name -> the module that defines it, imported on first use
EXPORTS = {
    "assert_max_memory": "pytest_torch.memory.api",
    "assert_no_memory_leak": "pytest_torch.memory.api",
    "MemoryBudgetError": "pytest_torch.memory.budgets",
    "MemoryLeakError": "pytest_torch.memory.leaks",
}
__all__ = [
    "MemoryBudgetError",
    "MemoryLeakError",
    "assert_max_memory",
    "assert_no_memory_leak",
]

__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
