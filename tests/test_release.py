"""One version for the family, set in one place, and a changelog entry for it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERSION = (REPO / "VERSION").read_text().strip()


def _load_set_version():
    spec = importlib.util.spec_from_file_location(
        "set_version", REPO / "scripts" / "set_version.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_package_has_the_family_version_and_pins_its_siblings_to_it():
    for pyproject in sorted((REPO / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        assert project["version"] == VERSION, pyproject
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        for requirement in requirements:
            if requirement.startswith("pytest-torch"):
                assert requirement.endswith(f"=={VERSION}"), f"{pyproject}: {requirement}"


def test_install_commands_in_the_docs_pin_the_family_version():
    """The meta-package's name on the public index is another project's: the docs pin it."""
    module = _load_set_version()
    for name in module.PINNED_DOCS:
        pins = module.DOC_PIN.findall((REPO / name).read_text())
        assert pins, f"{name} shows no pinned install of pytest-torch"
        text = (REPO / name).read_text()
        for match in module.DOC_PIN.finditer(text):
            assert match.group(0).endswith(f"=={VERSION}"), f"{name}: {match.group(0)}"


def test_the_changelog_has_a_section_for_this_version():
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(VERSION)}\b", changelog, re.MULTILINE)


def test_set_version_rewrites_every_version_and_pin(tmp_path, monkeypatch):
    copy = tmp_path / "repo"
    shutil.copytree(
        REPO / "packages", copy / "packages", ignore=shutil.ignore_patterns("src", "tests")
    )
    shutil.copy(REPO / "VERSION", copy / "VERSION")
    module = _load_set_version()
    for name in module.PINNED_DOCS:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, copy / name)
    monkeypatch.setattr(module, "REPO", copy)
    changed = module.set_version("9.8.7")
    pyprojects = len(list((copy / "packages").glob("*/pyproject.toml")))
    assert len(changed) == pyprojects + len(module.PINNED_DOCS)
    for name in module.PINNED_DOCS:
        text = (copy / name).read_text()
        assert '"pytest-torch==9.8.7"' in text and VERSION not in text, name
    assert (copy / "VERSION").read_text() == "9.8.7\n"
    meta = tomllib.loads((copy / "packages/pytest-torch/pyproject.toml").read_text())["project"]
    assert meta["version"] == "9.8.7"
    assert all(r.endswith("==9.8.7") for r in meta["dependencies"])
    assert meta["optional-dependencies"]["perf"] == ["pytest-torch-perf[plot]==9.8.7"]
    core = tomllib.loads((copy / "packages/pytest-torch-core/pyproject.toml").read_text())[
        "project"
    ]
    assert core["version"] == "9.8.7"
    assert not any("9.8.7" in r for r in core["dependencies"])  # third-party ranges untouched


def test_the_release_lanes_fail_on_any_error_of_a_scenario_and_run_the_rest(tmp_path, monkeypatch):
    """A scenario that fails in an unexpected way (not a failed command: an OSError, an
    exception with no message) fails the release check, naming it; the other scenarios
    still run, each once, on the lanes."""
    spec = importlib.util.spec_from_file_location(
        "release_check", REPO / "scripts" / "release_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran = []

    class FakeLane:
        def __init__(self, *args):
            pass

        def scenario(self, requirement, expected, examples, pages, log):
            ran.append(requirement)
            if requirement == "pytest-torch-ci":
                raise OSError("disk full")
            if requirement == "pytest-torch-xdist":
                raise KeyError()

    monkeypatch.setattr(module, "Lane", FakeLane)
    monkeypatch.setattr(module, "SCENARIOS", [(name, set(), [], []) for name in ("a", "b")])
    module.install_and_run(tmp_path, tmp_path, "0", lanes=2)  # every scenario passes
    assert sorted(ran) == ["a", "b"]
    for first, said in (("pytest-torch-ci", "disk full"), ("pytest-torch-xdist", "KeyError()")):
        ran.clear()
        scenarios = [(first, set(), [], []), ("a", set(), [], [])]
        monkeypatch.setattr(module, "SCENARIOS", scenarios)
        with pytest.raises(module.CheckFailed) as failed:
            module.install_and_run(tmp_path, tmp_path, "0", lanes=1)
        assert str(failed.value) == f"{first}: {said}"
        assert ran == [first]  # the first failure stops the lane taking more
