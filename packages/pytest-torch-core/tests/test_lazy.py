"""Unit tests of the lazy public names helper."""

from __future__ import annotations

import re
import sys
import types

import pytest

from pytest_torch.core.lazy import declared_exports, distribution_of, lazy_exports


@pytest.fixture
def package(monkeypatch):
    module = types.ModuleType("fake_family")
    monkeypatch.setitem(sys.modules, "fake_family", module)
    module.__getattr__, module.__dir__ = lazy_exports(
        "fake_family", {"dumps": "json", "missing": "pytest_torch.nothing.here"}
    )
    return module


def test_names_resolve_on_first_use_and_are_cached(package):
    import json

    assert "dumps" not in vars(package)
    assert package.dumps is json.dumps
    assert vars(package)["dumps"] is json.dumps
    assert "dumps" in dir(package)
    assert "missing" not in dir(package), "a name whose package is not installed"


def test_unknown_and_uninstalled_names_are_explained(package):
    with pytest.raises(AttributeError, match="module 'fake_family' has no attribute 'loads'"):
        package.loads  # noqa: B018
    with pytest.raises(ImportError) as raised:
        package.missing  # noqa: B018
    message = str(raised.value)
    assert message.startswith(
        "fake_family.missing is part of pytest-torch-nothing, which is not installed:"
    )
    assert "pip install ./packages/pytest-torch-nothing" in message
    assert "--find-links DIR 'pytest-torch-nothing==" in message
    assert "(or 'pytest-torch==" in message, "the meta-package's name needs its pin"
    assert distribution_of("pytest_torch.perf.syncs") == "pytest-torch-perf"
    assert package.__all__ == ["dumps", "missing"]


def test_a_package_declares_its_names_once_in_its_type_checking_imports(tmp_path):
    init = tmp_path / "__init__.py"
    init.write_text(
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n"
        "    from json import dumps as dumps\n"
        "    from os.path import join as join, split as split\n"
        "if typing.TYPE_CHECKING:\n"
        "    from json import loads as loads\n"
        "from json import JSONDecoder\n"
    )
    assert declared_exports(str(init)) == {
        "dumps": "json",
        "join": "os.path",
        "split": "os.path",
        "loads": "json",
    }


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("from json import dumps", "from json import dumps as dumps"),
        ("from json import dumps as d", "from json import dumps as dumps"),
        ("import json", "only 'from M import N as N'"),
    ],
)
def test_a_declaration_type_checkers_would_not_see_reexported_is_refused(tmp_path, line, says):
    init = tmp_path / "__init__.py"
    init.write_text(f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {line}\n")
    with pytest.raises(ValueError, match=re.escape(says)):
        declared_exports(str(init))


def test_an_installed_package_that_fails_to_import_raises_its_own_error(
    package, tmp_path, monkeypatch
):
    """Not "not installed": the user must see what really broke."""
    broken = tmp_path / "broken_feature"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "api.py").write_text("import a_module_that_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("fake_family2")
    monkeypatch.setitem(sys.modules, "fake_family2", module)
    module.__getattr__, _ = lazy_exports("fake_family2", {"thing": "broken_feature.api"})
    with pytest.raises(ModuleNotFoundError, match="a_module_that_does_not_exist"):
        module.thing  # noqa: B018
