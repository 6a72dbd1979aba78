"""The built wheels: namespace layout, typing marker, entry points, metadata."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())
PLUGINS = [p for p in FOLDERS if p.name != "pytest-torch"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
        ]
        + [str(p) for p in FOLDERS],
        check=True,
        capture_output=True,
    )
    built = {}
    for wheel in out.glob("*.whl"):
        name = wheel.name.split("-")[0].replace("_", "-")
        built[name] = zipfile.ZipFile(wheel)
    assert sorted(built) == [p.name for p in FOLDERS]
    return built


def _metadata(wheel: zipfile.ZipFile):
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return Parser().parsestr(wheel.read(name).decode())


def _entry_points(wheel: zipfile.ZipFile) -> str:
    names = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    return wheel.read(names[0]).decode() if names else ""


@pytest.mark.parametrize("folder", PLUGINS, ids=lambda p: p.name)
def test_plugin_wheel_is_a_namespace_portion_with_its_entry_point(wheels, folder):
    wheel = wheels[folder.name]
    short = folder.name.removeprefix("pytest-torch-")
    files = wheel.namelist()
    assert "pytest_torch/__init__.py" not in files, "only the meta-package may ship it"
    assert f"pytest_torch/{short}/__init__.py" in files
    assert f"pytest_torch/{short}/py.typed" in files
    assert f"pytest_torch/{short}/plugin.py" in files
    assert all(f.startswith((f"pytest_torch/{short}/", "pytest_torch_")) for f in files), files
    entry_points = _entry_points(wheel)
    assert f"[pytest11]\ntorch_{short} = pytest_torch.{short}.plugin" in entry_points


def test_meta_wheel_owns_only_the_namespace_init(wheels):
    files = [f for f in wheels["pytest-torch"].namelist() if not f.startswith("pytest_torch-")]
    assert sorted(files) == ["pytest_torch/__init__.py", "pytest_torch/py.typed"]
    assert "[pytest11]" not in _entry_points(wheels["pytest-torch"])


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_metadata(wheels, folder):
    meta = _metadata(wheels[folder.name])
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    assert meta["Name"] == folder.name
    assert meta["Version"] == project["version"]
    assert "Framework :: Pytest" in meta.get_all("Classifier")
    assert meta["Requires-Python"] == ">=3.10"
    assert meta.get_payload().strip(), "the README is the long description"
    for requirement in meta.get_all("Requires-Dist") or []:
        if requirement.startswith("torch"):
            assert requirement.replace(" ", "").startswith("torch>="), requirement
            assert "==" not in requirement and "<" not in requirement, (
                "packages declare the widest torch range they support; pins belong in"
                " constraints.txt"
            )
