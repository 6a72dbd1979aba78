"""The meta-package: it installs the whole family, so every public name resolves."""

from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest_torch

if sys.version_info >= (3, 11):
    import tomllib
else:  # the oldest supported Python
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[3]
PACKAGES = REPO / "packages"
FEATURES = ("perf", "memory", "determinism", "xdist", "ci", "distributed")


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _family() -> dict[str, dict]:
    return {
        p.name: _project(p) for p in sorted(PACKAGES.iterdir()) if (p / "pyproject.toml").exists()
    }


def _requirement_names(requirements: list[str]) -> dict[str, str]:
    names = {}
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", requirement)
        assert match, requirement
        names[match.group(1).lower()] = match.group(2).strip()
    return names


def test_every_reexported_name_resolves_with_the_whole_family_installed():
    from pytest_torch.core.exports import package_of

    declared = pytest_torch.DISTRIBUTIONS
    assert pytest_torch.__all__ == sorted(declared)
    for name in pytest_torch.__all__:
        value = getattr(pytest_torch, name)
        module = importlib.import_module(package_of(declared[name]))
        assert value is getattr(module, name), name
        assert name in dir(pytest_torch)
    namespace: dict[str, object] = {}
    exec("from pytest_torch import *", namespace)
    assert sorted(set(namespace) - {"__builtins__"}) == pytest_torch.__all__


def test_meta_depends_on_every_family_distribution_at_the_family_version():
    family = _family()
    meta = family.pop("pytest-torch")
    pins = _requirement_names(meta["dependencies"])
    for folder, project in family.items():
        assert project["name"] == folder
        assert pins.get(folder) == f"=={meta['version']}", (
            f"{folder} is missing from the meta-package's dependencies (or not pinned to"
            f" =={meta['version']})"
        )


def test_one_version_for_the_whole_family():
    versions = {folder: project["version"] for folder, project in _family().items()}
    assert len(set(versions.values())) == 1, versions


def test_extras_are_declared_and_name_their_feature_plugin():
    family = _family()
    extras = family["pytest-torch"]["optional-dependencies"]
    assert set(extras) == {*FEATURES, "all"}
    for feature in FEATURES:
        distribution = f"pytest-torch-{feature}"
        names = _requirement_names(extras[feature])
        if distribution in family:
            assert distribution in names, f"extra [{feature}] must install {distribution}"
        assert set(names) <= set(_requirement_names(extras["all"])), f"[all] misses [{feature}]"


def test_installed_metadata_matches_the_source():
    meta = _family()["pytest-torch"]
    installed = metadata.metadata("pytest-torch")
    assert installed["Version"] == meta["version"]
    assert set(installed.get_all("Provides-Extra") or []) == {*FEATURES, "all"}
    required = _requirement_names(
        [r for r in metadata.requires("pytest-torch") or [] if "extra ==" not in r]
    )
    assert required == _requirement_names(meta["dependencies"])
    for folder in _family():
        assert metadata.version(folder) == meta["version"], (
            f"{folder} is installed at another version"
        )
