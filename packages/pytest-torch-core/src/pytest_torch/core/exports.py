"""Public names imported on first use (PEP 562), declared once per package.

A package of the family declares its public names in its ``__init__``, as plain data
that needs no parsing, and keeps the same imports under ``TYPE_CHECKING`` for type
checkers::

    if TYPE_CHECKING:
        from pytest_torch.perf.syncs.checks import assert_no_host_sync as assert_no_host_sync

    EXPORTS = {"assert_no_host_sync": "pytest_torch.perf.syncs.checks"}
    __all__ = ["assert_no_host_sync"]
    __getattr__, __dir__ = lazy_names(__name__, EXPORTS)

Importing the package stays cheap (it never imports torch): each name is imported from
its module on first use. A test checks that the three agree.

The namespace root ``pytest_torch`` (shipped by core) serves the names of the packages
it finds installed in the namespace, each from its package, so ``__all__`` (and
``from pytest_torch import *``) follows whatever part of the family is installed. For a
name of a package that is not installed it names the distribution to install, from
its own map of every name to its distribution (a test checks it against the packages).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Mapping
from typing import Any

Exports = tuple[Callable[[str], Any], Callable[[], list[str]]]


def distribution_of(package: str) -> str:
    """``pytest_torch.perf`` (or a module in it) -> ``pytest-torch-perf``."""
    parts = package.split(".")
    return "pytest-torch" if len(parts) < 2 else f"pytest-torch-{parts[1]}"


def package_of(distribution: str, namespace: str = "pytest_torch") -> str:
    """``pytest-torch-perf`` -> ``pytest_torch.perf``."""
    return f"{namespace}.{distribution.removeprefix('pytest-torch-')}"


def install_hint(distribution: str) -> str:
    """How to install one distribution of the family beside the installed ones."""
    from importlib import metadata

    try:
        pin = f"=={metadata.version('pytest-torch-core')}"
    except metadata.PackageNotFoundError:
        pin = ""
    # the pin matters: "pytest-torch" on the public index is another project
    return (
        f"install it the way the rest of the family was installed: from a checkout,"
        f" pip install ./packages/{distribution}; from the release wheels, pip install"
        f" --find-links DIR '{distribution}{pin}' (or 'pytest-torch{pin}' for every"
        f" feature)"
    )


def _serve(owner: str, name: str, source: str) -> Any:
    """``name`` from module ``source``, cached in module ``owner``'s namespace."""
    value = getattr(importlib.import_module(source), name)
    setattr(sys.modules[owner], name, value)
    return value


def lazy_names(package: str, exports: Mapping[str, str]) -> Exports:
    """A package's ``__getattr__`` and ``__dir__``, serving ``exports`` (public name ->
    the module that defines it). A served name is cached in the package's namespace;
    a module that fails to import raises its own error."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return _serve(package, name, module)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def installed_packages(namespace: str = "pytest_torch") -> list[str]:
    """The packages installed in the namespace (``pytest_torch.perf``, ...), found in
    its portions without importing any of them."""
    root = sys.modules.get(namespace) or importlib.import_module(namespace)
    return sorted(
        f"{namespace}.{found.name}" for found in pkgutil.iter_modules(root.__path__) if found.ispkg
    )


def installed_names(namespace: str = "pytest_torch") -> dict[str, str]:
    """Public name -> its package, for every package installed in the namespace (each
    package's ``__init__`` is imported: it only declares its names)."""
    names: dict[str, str] = {}
    for package in installed_packages(namespace):
        declared = getattr(importlib.import_module(package), "EXPORTS", {})
        names.update(dict.fromkeys(declared, package))
    return names


def namespace_names(namespace: str, distributions: Mapping[str, str]) -> Exports:
    """The namespace root's ``__getattr__`` (``__all__`` included) and ``__dir__``: the
    names of the packages installed now; a name that ``distributions`` (every public
    name of the family -> its distribution) gives to a package that is not installed
    raises ImportError naming the distribution to install."""
    found: dict[str, str] = {}

    def served() -> dict[str, str]:
        if not found:
            found.update(installed_names(namespace))
        return found

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(served())
        package = served().get(name)
        if package is not None:
            return _serve(namespace, name, package)
        distribution = distributions.get(name)
        if distribution is not None:
            missing = package_of(distribution, namespace)
            if missing not in installed_packages(namespace):
                raise ImportError(
                    f"{namespace}.{name} is part of {distribution}, which is not installed:"
                    f" {install_hint(distribution)}.",
                    name=missing,
                )
        raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[namespace])) | set(served()))

    return __getattr__, __dir__
