"""pytest-torch-memory: peak-memory budgets and leak checks.

Public names: :func:`assert_no_memory_leak`, :func:`assert_max_memory`,
:class:`MemoryLeakError`, :class:`MemoryBudgetError`. Imported on first use; nothing
here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import exports_of, lazy_exports

if TYPE_CHECKING:
    from pytest_torch.memory.api import assert_max_memory, assert_no_memory_leak
    from pytest_torch.memory.budgets import MemoryBudgetError
    from pytest_torch.memory.leaks import MemoryLeakError

_EXPORTS = exports_of("memory")

__all__ = [
    "MemoryBudgetError",
    "MemoryLeakError",
    "assert_max_memory",
    "assert_no_memory_leak",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
