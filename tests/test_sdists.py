"""The sdists: each plugin's ships its tests with what they run with here (the
repository's pytest.ini and conftest.py at its root), so they run from the unpacked
sdist; the meta-package's ships none (they check the family's checkout). Running them
from the unpacked sdists is the release check's (`tox -e release` runs every package's
whole suite from its sdist), not repeated here: it would import torch and collect every
suite once more in this run."""

from __future__ import annotations

import runpy
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())
PLUGINS = [folder for folder in FOLDERS if (folder / "src").exists()]
BUILD = "import sys; from hatchling.build import build_sdist; print(build_sdist(sys.argv[1]))"


@pytest.fixture(scope="module")
def sdists(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("sdists")
    built = {}
    for folder in FOLDERS:
        made = subprocess.run(
            [sys.executable, "-c", BUILD, str(out)],
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
        )
        built[folder.name] = out / made.stdout.split()[-1]
    return built


def _sdist_problems():
    return runpy.run_path(str(REPO / "scripts" / "release_check.py"))["sdist_problems"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_each_sdist_ships_its_tests_with_the_settings_and_kit_they_run_with(sdists, folder):
    sdist = sdists[folder.name]
    with tarfile.open(sdist) as archive:
        assert _sdist_problems()(archive.getnames(), sdist.name) == []
        if folder in PLUGINS:
            root = sdist.name.removesuffix(".tar.gz")
            for name in ("pytest.ini", "conftest.py"):
                shipped = archive.extractfile(f"{root}/{name}")
                assert shipped is not None and shipped.read() == (REPO / name).read_bytes()


def test_the_sdist_check_wants_the_test_kit_beside_the_tests():
    problems = _sdist_problems()
    names = ["p-1/src/pytest_torch/p/__init__.py", "p-1/tests/test_p.py", "p-1/pyproject.toml"]
    assert problems(names, "p-1.tar.gz") == [
        "lacks pytest.ini",
        "lacks conftest.py",
    ]
    assert problems(["pytest_torch-1/tests/test_meta.py"], "pytest_torch-1.tar.gz") == [
        "the meta-package's sdist ships tests: ['pytest_torch-1/tests/test_meta.py']"
    ]
    assert problems(["p-1/pytest.ini", "p-1/conftest.py"], "p-1.tar.gz") == [
        "lacks src/pytest_torch/",
        "ships no tests",
    ]
