"""Public names imported on first use (PEP 562), for the family's package ``__init__``s.

Importing a plugin package must stay cheap and never import torch, so packages list
their public names with the module that defines each, and resolve them lazily::

    __getattr__, __dir__ = lazy_exports(__name__, {"assert_close": "pytest_torch.core.compare"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def distribution_of(module_name: str) -> str:
    """``pytest_torch.perf.syncs`` -> ``pytest-torch-perf``."""
    parts = module_name.split(".")
    return "pytest-torch" if len(parts) < 2 else f"pytest-torch-{parts[1]}"


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` serving ``exports`` (name -> module).

    A resolved name is cached in the package's namespace. A name whose plugin is not
    installed raises ImportError saying which distribution to install.
    """

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            distribution = distribution_of(module_name)
            raise ImportError(
                f"{package}.{name} comes from {distribution}, which is not installed"
                f" ({exc}). Install it with: pip install {distribution}"
            ) from exc
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
