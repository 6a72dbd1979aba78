"""The namespace root ``pytest_torch/__init__.py`` ships in core: every installed
feature's public names at ``pytest_torch``, a clear ImportError for the others."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_torch
from pytest_torch.core.lazy import distribution_of, is_installed

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
    assert sorted(pytest_torch.__all__) == sorted(pytest_torch._EXPORTS)
    for name, module_name in pytest_torch._EXPORTS.items():
        if is_installed(module_name):
            value = getattr(pytest_torch, name)
            assert value is getattr(importlib.import_module(module_name), name), name
            assert name in dir(pytest_torch)
        else:
            distribution = distribution_of(module_name)
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


def test_each_installed_package_serves_its_part_of_the_one_catalogue():
    from pytest_torch.core.lazy import FAMILY_EXPORTS, exports_of

    parts = {}
    for package in ("core", "perf", "memory", "determinism", "xdist", "ci"):
        parts[package] = exports_of(package)
        if not is_installed(f"pytest_torch.{package}"):
            continue
        module = importlib.import_module(f"pytest_torch.{package}")
        if hasattr(module, "_EXPORTS"):
            assert parts[package] == module._EXPORTS, package
            assert sorted(module.__all__) == sorted(parts[package]), package
    assert sum(len(part) for part in parts.values()) == len(FAMILY_EXPORTS)
