"""pytest-torch-memory: peak-memory budgets and leak checks.

Its public names are the imports under ``TYPE_CHECKING`` below, each imported on first
use; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import package_exports

if TYPE_CHECKING:
    from pytest_torch.memory.api import assert_max_memory as assert_max_memory
    from pytest_torch.memory.api import assert_no_memory_leak as assert_no_memory_leak
    from pytest_torch.memory.budgets import MemoryBudgetError as MemoryBudgetError
    from pytest_torch.memory.leaks import MemoryLeakError as MemoryLeakError

__getattr__, __dir__ = package_exports(__name__, __file__)
