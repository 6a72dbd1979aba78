"""Public names imported on first use (PEP 562), for the family's package ``__init__``s.

Importing a plugin package must stay cheap and never import torch, so packages list
their public names with the module that defines each, and resolve them lazily::

    __getattr__, __dir__ = lazy_exports(__name__, {"assert_close": "pytest_torch.core.compare"})
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

#: every public name of the family -> the module that defines it: the one catalogue, for
#: the namespace root (``from pytest_torch import X``) and each package's ``__init__``
FAMILY_EXPORTS: dict[str, str] = {
    "assert_close": "pytest_torch.core.compare",
    "Mismatch": "pytest_torch.core.compare",
    "TensorMismatchError": "pytest_torch.core.compare",
    "HardwareFingerprint": "pytest_torch.core.fingerprint",
    "hardware_fingerprint": "pytest_torch.core.fingerprint",
    "PeakMemory": "pytest_torch.core.memory",
    "PeakTracker": "pytest_torch.core.memory",
    "LatencyResult": "pytest_torch.perf.measure.timing",
    "PerfNotJudgedError": "pytest_torch.perf.checks",
    "PerfRegressionError": "pytest_torch.perf.checks",
    "GraphBreakError": "pytest_torch.perf.compilation.checks",
    "assert_no_graph_breaks": "pytest_torch.perf.compilation.checks",
    "assert_no_host_sync": "pytest_torch.perf.syncs.checks",
    "benchmark_suite": "pytest_torch.perf.suites.cases",
    "find_host_syncs": "pytest_torch.perf.syncs.checks",
    "measure_latency": "pytest_torch.perf.measure.calls",
    "MemoryBudgetError": "pytest_torch.memory.budgets",
    "MemoryLeakError": "pytest_torch.memory.leaks",
    "assert_max_memory": "pytest_torch.memory.api",
    "assert_no_memory_leak": "pytest_torch.memory.api",
    "CannotCompare": "pytest_torch.determinism.outputs",
    "Diagnosis": "pytest_torch.determinism.diagnosis",
    "InputsChangedWarning": "pytest_torch.determinism.assertion",
    "NondeterminismError": "pytest_torch.determinism.assertion",
    "assert_deterministic": "pytest_torch.determinism.assertion",
    "diagnose_nondeterminism": "pytest_torch.determinism.diagnosis",
}


def exports_of(package: str) -> dict[str, str]:
    """The part of :data:`FAMILY_EXPORTS` that ``pytest_torch.<package>`` defines."""
    prefix = f"pytest_torch.{package}."
    return {name: module for name, module in FAMILY_EXPORTS.items() if module.startswith(prefix)}


def distribution_of(module_name: str) -> str:
    """``pytest_torch.perf.syncs`` -> ``pytest-torch-perf``."""
    parts = module_name.split(".")
    return "pytest-torch" if len(parts) < 2 else f"pytest-torch-{parts[1]}"


def _feature_package(module_name: str) -> str:
    """``pytest_torch.perf.syncs`` -> ``pytest_torch.perf``."""
    return ".".join(module_name.split(".")[:2])


def is_installed(module_name: str) -> bool:
    """Whether the family package that defines ``module_name`` is installed (without
    importing it)."""
    try:
        return importlib.util.find_spec(_feature_package(module_name)) is not None
    except (ImportError, ValueError):
        return False


def _family_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("pytest-torch-core")
    except metadata.PackageNotFoundError:
        return None


def install_hint(distribution: str) -> str:
    """How to install one distribution of the family beside the installed ones."""
    version = _family_version()
    pin = f"=={version}" if version else ""
    # the pin matters: "pytest-torch" on the public index is another project
    return (
        f"install it the way the rest of the family was installed: from a checkout,"
        f" pip install ./packages/{distribution}; from the release wheels, pip install"
        f" --find-links DIR '{distribution}{pin}' (or 'pytest-torch{pin}' for every"
        f" feature)"
    )


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` serving ``exports`` (name -> module).

    A resolved name is cached in the package's namespace. A name whose package is not
    installed raises ImportError saying which distribution to install; an installed
    package that fails to import raises its own error.
    """

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if not is_installed(module_name):
            distribution = distribution_of(module_name)
            raise ImportError(
                f"{package}.{name} is part of {distribution}, which is not installed:"
                f" {install_hint(distribution)}.",
                name=_feature_package(module_name),
            )
        value = getattr(importlib.import_module(module_name), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        available = {name for name, module in exports.items() if is_installed(module)}
        return sorted(set(vars(sys.modules[package])) | available)

    return __getattr__, __dir__
