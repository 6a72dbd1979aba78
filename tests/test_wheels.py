"""The built wheels: namespace layout, typing marker, entry points, metadata."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())


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


def _wheel_problems():
    spec = importlib.util.spec_from_file_location(
        "release_check", REPO / "scripts" / "release_check.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.wheel_problems


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_wheel_is_a_namespace_portion_with_its_entry_point(wheels, folder):
    """Plugins: their package, py.typed, plugin.py and torch_<name> entry point; core
    alone also ships the namespace __init__; the meta-package: no code, no plugin."""
    wheel = wheels[folder.name]
    assert _wheel_problems()(wheel, Path(wheel.filename).name) == []


def test_the_wheel_check_catches_a_plugin_that_ships_the_namespace(tmp_path):
    path = tmp_path / "pytest_torch_perf-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name in (
            "pytest_torch/__init__.py",
            "pytest_torch/perf/__init__.py",
            "pytest_torch/perf/plugin.py",
        ):
            wheel.writestr(name, "")
    with zipfile.ZipFile(path) as wheel:
        problems = _wheel_problems()(wheel, path.name)
    assert "lacks pytest_torch/perf/py.typed" in problems
    assert "ships pytest_torch/__init__.py (only pytest-torch-core may)" in problems
    assert any(p.startswith("ships files outside its package") for p in problems)
    assert any(p.startswith("entry point torch_perf missing") for p in problems)


def test_the_wheel_check_wants_the_namespace_root_in_core_and_no_code_in_the_meta_package(
    tmp_path,
):
    core = tmp_path / "pytest_torch_core-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(core, "w") as wheel:
        for name in ("__init__.py", "py.typed", "plugin.py"):
            wheel.writestr(f"pytest_torch/core/{name}", "")
        wheel.writestr(
            "pytest_torch_core-0.1.0.dist-info/entry_points.txt",
            "[pytest11]\ntorch_core = pytest_torch.core.plugin\n",
        )
    with zipfile.ZipFile(core) as wheel:
        assert _wheel_problems()(wheel, core.name) == [
            "lacks pytest_torch/__init__.py",
            "lacks pytest_torch/py.typed",
        ]
    meta = tmp_path / "pytest_torch-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(meta, "w") as wheel:
        wheel.writestr("pytest_torch/__init__.py", "")
    with zipfile.ZipFile(meta) as wheel:
        assert _wheel_problems()(wheel, meta.name) == [
            "the meta-package must ship no code, ships ['pytest_torch/__init__.py']"
        ]


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
