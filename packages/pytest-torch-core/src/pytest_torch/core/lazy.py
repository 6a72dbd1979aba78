"""Public names imported on first use (PEP 562), declared once per package.

A package of the family declares its public names once, as the imports under
``if TYPE_CHECKING:`` in its ``__init__``, each in the explicit re-export form::

    if TYPE_CHECKING:
        from pytest_torch.perf.syncs.checks import assert_no_host_sync as assert_no_host_sync

    __getattr__, __dir__ = package_exports(__name__, __file__)

Type checkers read those lines as they are; at run time they are read, not executed
(importing a plugin package must stay cheap and never import torch), and each name is
imported from its module on first use. ``__all__`` follows from them too.

The namespace root ``pytest_torch`` (shipped by core) re-exports every package's names
the same way, from the packages (``from pytest_torch.perf import X as X``), and learns
which packages are installed from the namespace itself, never from a list of
modules: its own declaration serves type checkers and names the distribution to
install for a package that is not there. A test checks that the root and the packages
agree.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

Exports = tuple[Callable[[str], Any], Callable[[], list[str]]]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@cache
def declared_exports(source: str) -> dict[str, str]:
    """Public name -> the module it is imported from, as declared by the
    ``from M import N as N`` lines under ``if TYPE_CHECKING:`` of a package's
    ``__init__`` (``source`` is its path)."""
    tree = ast.parse(Path(source).read_text(encoding="utf-8"), filename=source)
    exports: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom) or not statement.module:
                raise ValueError(f"{source}: only 'from M import N as N' under TYPE_CHECKING")
            for alias in statement.names:
                if alias.asname != alias.name:
                    raise ValueError(
                        f"{source}: write 'from {statement.module} import {alias.name} as"
                        f" {alias.name}' so that type checkers see it re-exported"
                    )
                exports[alias.name] = statement.module
    return exports


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


def _not_installed(package: str, name: str, module_name: str) -> ImportError:
    distribution = distribution_of(module_name)
    return ImportError(
        f"{package}.{name} is part of {distribution}, which is not installed:"
        f" {install_hint(distribution)}.",
        name=_feature_package(module_name),
    )


def _serve(package: str, name: str, module_name: str) -> Any:
    """The value of ``name`` from ``module_name``, cached in ``package``'s namespace."""
    value = getattr(importlib.import_module(module_name), name)
    setattr(sys.modules[package], name, value)
    return value


def lazy_exports(package: str, exports: dict[str, str]) -> Exports:
    """A module ``__getattr__`` and ``__dir__`` serving ``exports`` (name -> module);
    ``__all__`` is their names.

    A resolved name is cached in the package's namespace. A name whose package is not
    installed raises ImportError saying which distribution to install; an installed
    package that fails to import raises its own error.
    """

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(exports)
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if not is_installed(module_name):
            raise _not_installed(package, name, module_name)
        return _serve(package, name, module_name)

    def __dir__() -> list[str]:
        available = {name for name, module in exports.items() if is_installed(module)}
        return sorted(set(vars(sys.modules[package])) | available)

    return __getattr__, __dir__


def package_exports(package: str, init_file: str) -> Exports:
    """``__getattr__`` and ``__dir__`` of a family package whose ``__init__`` (at
    ``init_file``) declares its public names under ``if TYPE_CHECKING:``."""
    return lazy_exports(package, declared_exports(init_file))


def installed_packages(namespace: str = "pytest_torch") -> list[str]:
    """The family's packages installed in this environment (``pytest_torch.perf``, ...),
    found in the namespace's portions without importing any of them."""
    root = sys.modules.get(namespace) or importlib.import_module(namespace)
    return sorted(
        f"{namespace}.{found.name}" for found in pkgutil.iter_modules(root.__path__) if found.ispkg
    )


@cache
def _installed_exports(namespace: str) -> dict[str, str]:
    """Public name -> its package, for every installed package of the family."""
    exports: dict[str, str] = {}
    for package in installed_packages(namespace):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        exports.update(dict.fromkeys(declared_exports(spec.origin), package))
    return exports


def namespace_exports(namespace: str, init_file: str) -> Exports:
    """``__getattr__`` and ``__dir__`` of the namespace root: every installed package's
    public names, served from that package; a name the root declares for a package
    that is not installed raises ImportError naming the distribution to install."""
    declared = declared_exports(init_file)

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            return sorted(declared)
        package = _installed_exports(namespace).get(name)
        if package is not None:
            return _serve(namespace, name, package)
        if name in declared and not is_installed(declared[name]):
            raise _not_installed(namespace, name, declared[name])
        raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[namespace])) | set(_installed_exports(namespace)))

    return __getattr__, __dir__
