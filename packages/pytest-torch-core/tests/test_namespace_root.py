"""The namespace root ``pytest_torch/__init__.py`` ships in core: every installed
feature's public names at ``pytest_torch``, a clear ImportError for the others."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_torch
from pytest_torch.core.lazy import (
    declared_exports,
    distribution_of,
    installed_packages,
    is_installed,
)

CORE_SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_root_is_cores_and_starts_with_extend_path():
    root = Path(pytest_torch.__file__).resolve()
    assert root == CORE_SRC / "pytest_torch" / "__init__.py" or root.parent.parent.name in (
        "site-packages",
        "dist-packages",
    ), root
    assert (root.parent / "py.typed").exists()
    first = root.read_text().splitlines()[0]
    assert first == '__path__ = __import__("pkgutil").extend_path(__path__, __name__)'


def test_every_name_resolves_or_names_the_distribution_to_install():
    declared = declared_exports(pytest_torch.__file__)
    assert sorted(pytest_torch.__all__) == sorted(declared)
    for name, package in declared.items():
        if is_installed(package):
            value = getattr(pytest_torch, name)
            assert value is getattr(importlib.import_module(package), name), name
            assert name in dir(pytest_torch)
        else:
            distribution = distribution_of(package)
            with pytest.raises(ImportError, match=f"is part of {distribution}, which is not"):
                exec(f"from pytest_torch import {name}", {})
            assert name not in dir(pytest_torch)


def test_reexports_are_cached_and_unknown_names_fail_clearly():
    from pytest_torch import assert_close

    assert pytest_torch.__dict__["assert_close"] is assert_close
    with pytest.raises(AttributeError, match="has no attribute 'assert_nothing'"):
        pytest_torch.assert_nothing  # noqa: B018


def test_importing_the_root_does_not_import_torch():
    code = (
        "import sys, pytest_torch; from pytest_torch import assert_close;"
        " dir(pytest_torch); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_root_declares_what_each_installed_package_declares():
    """A package declares its names once; the root's declaration (what type checkers
    read, and what names a distribution that is not installed) must say the same."""
    root = declared_exports(pytest_torch.__file__)
    for package in installed_packages():
        module = importlib.import_module(package)
        own = declared_exports(module.__file__)
        assert sorted(name for name, where in root.items() if where == package) == sorted(own)
        assert sorted(getattr(module, "__all__", [])) == sorted(own), package
        for name, module_name in own.items():
            assert getattr(module, name) is getattr(importlib.import_module(module_name), name)
    assert "pytest_torch.core" in installed_packages()
