"""Unit tests of the lazy public names helper."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_torch.core.lazy import distribution_of, lazy_exports


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
    assert {"dumps", "missing"} <= set(dir(package))


def test_unknown_and_uninstalled_names_are_explained(package):
    with pytest.raises(AttributeError, match="module 'fake_family' has no attribute 'loads'"):
        package.loads  # noqa: B018
    with pytest.raises(
        ImportError,
        match=r"fake_family.missing comes from pytest-torch-nothing, which is not installed .* pip install pytest-torch-nothing",
    ):
        package.missing  # noqa: B018
    assert distribution_of("pytest_torch.perf.syncs") == "pytest-torch-perf"
