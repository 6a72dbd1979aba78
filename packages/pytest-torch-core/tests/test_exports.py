"""Unit tests of the public names helpers (core/exports.py)."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_torch.core.exports import (
    distribution_of,
    install_hint,
    lazy_names,
    namespace_names,
    package_of,
)


@pytest.fixture
def package(monkeypatch):
    module = types.ModuleType("fake_family")
    monkeypatch.setitem(sys.modules, "fake_family", module)
    module.__getattr__, module.__dir__ = lazy_names("fake_family", {"dumps": "json"})
    return module


def test_names_resolve_on_first_use_and_are_cached(package):
    import json

    assert "dumps" not in vars(package)
    assert "dumps" in dir(package)
    assert package.dumps is json.dumps
    assert vars(package)["dumps"] is json.dumps


def test_an_unknown_name_is_an_attribute_error(package):
    with pytest.raises(AttributeError, match="module 'fake_family' has no attribute 'loads'"):
        package.loads  # noqa: B018
    assert not hasattr(package, "loads")


def test_a_module_that_fails_to_import_raises_its_own_error(tmp_path, monkeypatch):
    """Not "not installed": the user must see what really broke."""
    broken = tmp_path / "broken_feature"
    broken.mkdir()
    (broken / "__init__.py").write_text("")
    (broken / "api.py").write_text("import a_module_that_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("fake_family2")
    monkeypatch.setitem(sys.modules, "fake_family2", module)
    module.__getattr__, _ = lazy_names("fake_family2", {"thing": "broken_feature.api"})
    with pytest.raises(ModuleNotFoundError, match="a_module_that_does_not_exist"):
        module.thing  # noqa: B018


def test_distributions_and_packages_are_named_alike():
    assert distribution_of("pytest_torch.perf.syncs") == "pytest-torch-perf"
    assert distribution_of("pytest_torch.perf") == "pytest-torch-perf"
    assert distribution_of("pytest_torch") == "pytest-torch"
    assert package_of("pytest-torch-perf") == "pytest_torch.perf"
    assert package_of("pytest-torch-perf", "fakens") == "fakens.perf"
    hint = install_hint("pytest-torch-nothing")
    assert "pip install ./packages/pytest-torch-nothing" in hint
    assert "--find-links DIR 'pytest-torch-nothing==" in hint
    assert "(or 'pytest-torch==" in hint, "the meta-package's name needs its pin"


@pytest.fixture
def namespace(tmp_path, monkeypatch):
    """A namespace ``fakens`` with one package installed (``alpha``), and a root that
    also knows a name of a package that is not (``beta``)."""
    alpha = tmp_path / "fakens" / "alpha"
    alpha.mkdir(parents=True)
    (alpha / "__init__.py").write_text(
        "from pytest_torch.core.exports import lazy_names\n"
        "EXPORTS = {'dumps': 'json'}\n"
        "__all__ = ['dumps']\n"
        "__getattr__, __dir__ = lazy_names(__name__, EXPORTS)\n"
    )
    (tmp_path / "fakens" / "notes").mkdir()  # a folder without __init__: not a package
    monkeypatch.syspath_prepend(str(tmp_path))
    root = types.ModuleType("fakens")
    root.__path__ = [str(tmp_path / "fakens")]
    monkeypatch.setitem(sys.modules, "fakens", root)
    monkeypatch.delitem(sys.modules, "fakens.alpha", raising=False)
    distributions = {"dumps": "pytest-torch-alpha", "gone": "pytest-torch-beta"}
    root.__getattr__, root.__dir__ = namespace_names("fakens", distributions)
    return root


def test_the_root_serves_the_names_of_the_installed_packages(namespace):
    import json

    assert namespace.__all__ == ["dumps"]
    assert "dumps" in dir(namespace)
    assert "gone" not in dir(namespace)
    assert namespace.dumps is json.dumps
    assert vars(namespace)["dumps"] is json.dumps
    assert vars(sys.modules["fakens.alpha"])["dumps"] is json.dumps


def test_a_name_of_a_package_not_installed_names_its_distribution(namespace):
    with pytest.raises(ImportError) as raised:
        namespace.gone  # noqa: B018
    assert raised.value.name == "fakens.beta"
    message = str(raised.value)
    assert message.startswith(
        "fakens.gone is part of pytest-torch-beta, which is not installed: install it"
    )
    assert "pip install ./packages/pytest-torch-beta" in message
    with pytest.raises(AttributeError, match="module 'fakens' has no attribute 'nothing'"):
        namespace.nothing  # noqa: B018
