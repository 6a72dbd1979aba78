"""The tests' own layout: a package's tests mirror its rooms (the tests of
``perf/engines/wall/`` in ``tests/engines/wall/``), and no test file grows past 500 lines."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = sorted(p for p in (REPO / "packages").iterdir() if (p / "src").exists())
#: the same ceiling as a module of the packages' code (tests/test_repository.py)
MAX_LINES = 500


def _test_files():
    for folder in [*(p / "tests" for p in FOLDERS), REPO / "packages" / "pytest-torch" / "tests"]:
        yield from sorted(folder.rglob("*.py"))
    yield from sorted((REPO / "tests").rglob("*.py"))


def test_no_test_file_over_500_lines():
    """Past that, split it along a seam: a file per room, per concern, per kind of run."""
    problems = [
        f"{path.relative_to(REPO)}: {lines} lines (at most {MAX_LINES})"
        for path in _test_files()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not problems, "\n".join(problems)


def test_each_folder_of_tests_mirrors_a_room_of_its_package():
    """A folder holding test modules under a package's tests/ is named for the
    sub-package it tests (``tests/syncs/`` for ``pytest_torch/perf/syncs/``); helpers and
    data beside them (a catalogue, recorded files) hold no test modules."""
    problems = []
    for folder in FOLDERS:
        src = folder / "src" / "pytest_torch"
        (package,) = [p for p in src.iterdir() if p.is_dir() and p.name != "__pycache__"]
        for tests in sorted({path.parent for path in (folder / "tests").rglob("test_*.py")}):
            room = tests.relative_to(folder / "tests")
            if room.parts and not (package / room).is_dir():
                problems.append(f"{tests.relative_to(REPO)}: no room {package.name}/{room}/")
    assert not problems, "\n".join(problems)
