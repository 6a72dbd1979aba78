"""Build every package as a release would and install the wheels as users will.

``python scripts/release_check.py [--keep DIR]``:

1. ``python -m build`` makes the sdist and, from it, the wheel of every package;
2. ``twine check`` validates their metadata and long descriptions;
3. the wheels' contents are checked: one namespace ``__init__.py`` (core's),
   ``py.typed`` in every package, the pytest entry points, the family version; and the
   sdists': each plugin's ships its tests with the repository's ``pytest.ini`` and
   ``conftest.py`` at its root, the meta-package's ships no tests;
4. clean virtual environments install the wheels the ways the README promises
   (``pytest-torch``, ``"pytest-torch[perf]"``, and each feature alone): two lanes,
   side by side (``--lanes``), each one environment that takes one scenario after
   the other with the family uninstalled in between: each scenario checks that every
   public name at ``pytest_torch`` resolves or names the distribution to install, and
   runs the examples and the documentation snippets that apply to it (its output is
   printed whole when it ends);
5. with ``--tests``, each scenario also runs the tests of the package it installs, from
   the package's unpacked sdist (the meta-package's, which ships none, from this
   checkout) against the installed wheels, with plugin autoload off and only the
   family's plugins it installed enabled with ``-p`` (in one process, as a packager runs
   them: the two lanes keep both cores busy): each package
   works alone, enabled one by one, and its sdist's tests run without the checkout.

Third-party requirements come from the package index (torch pinned by
constraints.txt); the family's own packages only from the freshly built wheels.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").exists())
PLUGINS = ["core", "perf", "memory", "determinism", "xdist", "ci", "distributed"]
THIRD_PARTY = ["torch", "pytest>=8.1", "pytest-xdist>=3.5", "filelock>=3.12", "matplotlib>=3.5",
               "py-cpuinfo>=9", "numpy"]  # fmt: skip
#: what ``--tests`` adds to the clean environment: the tools every suite of ours runs with
TEST_TOOLS = ["pytest-randomly>=3.15", "pytest-html>=4"]
ALL = {f"pytest-torch-{name}" for name in PLUGINS} | {"pytest-torch"}
SCENARIOS = [
    # (requirement, the family's distributions it must install, example files to run,
    #  documentation pages whose snippets must run), the longest first: two lanes take
    #  them in this order (install_and_run).
    # The whole example suite runs in the demo (tox -e suite); here the plugins whose
    # examples need no other plugin run theirs against the installed wheels, alone
    (
        "pytest-torch-perf",
        {"pytest-torch-core", "pytest-torch-perf"},
        ["tests/test_performance.py", "tests/test_compile.py", "tests/test_benchmarks.py"],
        ["performance.md", "benchmark-suites.md"],
    ),
    (
        "pytest-torch-distributed",
        {"pytest-torch-core", "pytest-torch-distributed"},
        ["tests/test_distributed_training.py"],
        ["distributed.md"],
    ),
    (
        "pytest-torch-determinism",
        {"pytest-torch-core", "pytest-torch-determinism"},
        [],
        ["determinism.md"],
    ),
    ("pytest-torch-core", {"pytest-torch-core"}, [], ["core.md"]),
    ("pytest-torch-memory", {"pytest-torch-core", "pytest-torch-memory"}, [], ["memory.md"]),
    ("pytest-torch-xdist", {"pytest-torch-core", "pytest-torch-xdist"}, [], ["parallel.md"]),
    ("pytest-torch-ci", {"pytest-torch-core", "pytest-torch-ci"}, [], ["ci.md"]),
    ("pytest-torch", ALL, [], ["index.md"]),
    # installs what pytest-torch does: here the extra must resolve
    ("pytest-torch[perf]", ALL, [], []),
]
#: with any part of the family installed: every public name at pytest_torch resolves, or
#: raises ImportError naming the distribution to install
CHECK_NAMES = """
import importlib, pytest_torch
from pytest_torch.core.exports import installed_packages, package_of
declared = pytest_torch.DISTRIBUTIONS
installed = installed_packages()
missing = set()
for name, distribution in declared.items():
    if package_of(distribution) in installed:
        value = getattr(importlib.import_module(package_of(distribution)), name)
        assert getattr(pytest_torch, name) is value
        continue
    try:
        exec(f"from pytest_torch import {name}")
    except ImportError as error:
        assert f"is part of {distribution}, which is not installed" in str(error)
        missing.add(distribution)
    else:
        raise AssertionError(f"{name} imported without its package")
star = {}
exec("from pytest_torch import *", star)
assert sorted(set(star) - {"__builtins__"}) == pytest_torch.__all__
print(len(declared), "names;", "not installed:", sorted(missing) or "none")
"""

LIST_PLUGINS = (
    "import importlib.metadata as m; print(sorted(e.name for e in"
    " m.entry_points(group='pytest11') if e.name.startswith('torch_')))"
)
#: what a run of the examples writes: left out of every copy of them (scripts/demo.py's too)
GENERATED_FILES = shutil.ignore_patterns(
    "benchmark-results", "failure-artifacts", ".torch-perf-baselines.json*", ".pytest_cache"
)


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


class CheckFailed(Exception):
    """A step failed: the message says which, with its output."""


def run(*command: str | Path, cwd: Path | None = None) -> str:
    """The command's output; a failure raises :class:`CheckFailed` with its output."""
    result = subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise CheckFailed(
            f"{' '.join(map(str, command))} (exit {result.returncode})\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result.stdout


def build(dist: Path) -> None:
    step(f"python -m build: sdist and wheel of {len(PACKAGES)} packages")
    for package in PACKAGES:
        run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, package)
    for path in sorted(dist.iterdir()):
        print(f"  {path.name}")


def wheel_problems(wheel: zipfile.ZipFile, filename: str) -> list[str]:
    """What is wrong with one wheel of the family (empty when nothing is): only core
    ships the namespace root ``pytest_torch/__init__.py`` (with ``py.typed``); each
    plugin ships its own package with ``py.typed``, its ``plugin.py`` and its
    ``torch_<name>`` pytest11 entry point, and nothing outside its package; the
    meta-package ships no code and registers no plugin."""
    name, version = filename.split("-")[:2]
    files = wheel.namelist()
    dist_info = f"{name}-{version}.dist-info/"
    entry_points = ""
    if f"{dist_info}entry_points.txt" in files:
        entry_points = wheel.read(f"{dist_info}entry_points.txt").decode()
    code = sorted(f for f in files if not f.startswith(dist_info))
    if name == "pytest_torch":
        problems = []
        if code:
            problems.append(f"the meta-package must ship no code, ships {code}")
        if "[pytest11]" in entry_points:
            problems.append("the meta-package must not register a pytest plugin")
        return problems
    short = name.removeprefix("pytest_torch_")
    root = ["pytest_torch/__init__.py", "pytest_torch/py.typed"]
    problems = [
        f"lacks {needed}"
        for needed in (
            *(f"pytest_torch/{short}/{f}" for f in ("__init__.py", "py.typed", "plugin.py")),
            *(root if short == "core" else []),
        )
        if needed not in files
    ]
    if short != "core" and "pytest_torch/__init__.py" in files:
        problems.append("ships pytest_torch/__init__.py (only pytest-torch-core may)")
    allowed = root if short == "core" else []
    stray = [f for f in code if not f.startswith(f"pytest_torch/{short}/") and f not in allowed]
    if stray:
        problems.append(f"ships files outside its package: {stray}")
    if f"[pytest11]\ntorch_{short} = pytest_torch.{short}.plugin" not in entry_points:
        problems.append(f"entry point torch_{short} missing: {entry_points!r}")
    return problems


#: what each plugin's sdist ships at its root beside src/ and tests/, for its tests to run
#: from it as they do in this checkout
SDIST_TEST_KIT = ("pytest.ini", "conftest.py")


def sdist_problems(names: list[str], filename: str) -> list[str]:
    """What is wrong with one sdist of the family (empty when nothing is), given the
    names in it: a plugin's ships its sources and its tests with the repository's pytest
    settings and test kit at its root; the meta-package's ships no tests (they check the
    family's checkout)."""
    root = filename.removesuffix(".tar.gz") + "/"
    tests = [n for n in names if n.startswith(f"{root}tests/")]
    if filename.startswith("pytest_torch-"):
        return [f"the meta-package's sdist ships tests: {tests[:3]}"] if tests else []
    problems = [f"lacks {needed}" for needed in SDIST_TEST_KIT if root + needed not in names]
    if not any(n.startswith(f"{root}src/pytest_torch/") for n in names):
        problems.append("lacks src/pytest_torch/")
    if not any(n.rsplit("/", 1)[-1].startswith("test_") for n in tests):
        problems.append("ships no tests")
    return problems


def check_contents(dist: Path, version: str) -> None:
    step("wheel and sdist contents")
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == len(sdists) == len(PACKAGES), (wheels, sdists)
    for wheel in wheels:
        assert wheel.name.split("-")[1] == version, f"{wheel.name}: not version {version}"
        with zipfile.ZipFile(wheel) as opened:
            problems = wheel_problems(opened, wheel.name)
            assert not problems, f"{wheel.name}: {'; '.join(problems)}"
            print(f"  {wheel.name}: {len(opened.namelist())} files, ok")
    for sdist in sdists:
        with tarfile.open(sdist) as opened:
            names = opened.getnames()
        problems = sdist_problems(names, sdist.name)
        assert not problems, f"{sdist.name}: {'; '.join(problems)}"
        print(f"  {sdist.name}: {len(names)} files, ok")


def run_shown(
    *command: str | Path, log: list[str], cwd: Path, env: dict[str, str] | None = None
) -> None:
    """A test run: its whole output goes into the scenario's log (its lines, printed in
    one piece when the scenario ends: two lanes run side by side, and their outputs must
    not interleave)."""
    log.append(f"  + {' '.join(map(str, command))}")
    result = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    log.append(result.stdout.rstrip("\n"))
    if result.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, command))} (exit {result.returncode})")


def run_package_tests(
    python: Path, requirement: str, installed: set[str], sdist: Path, work: Path, log: list[str]
) -> None:
    """The tests of the package a scenario installed, from its unpacked sdist (the
    meta-package's, which ships none, from this checkout), against the installed wheels,
    with plugin autoload off and only the installed plugins enabled with -p."""
    with tarfile.open(sdist) as archive:  # our own archive; the data filter where it exists
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(work / "sdists", **safe)  # type: ignore[arg-type]
    folder = work / "sdists" / sdist.name.removesuffix(".tar.gz")
    if not (folder / "tests").is_dir():
        folder = REPO / "packages" / requirement
    plugins = [f"torch_{name}" for name in PLUGINS if f"pytest-torch-{name}" in installed]
    enabled = [arg for plugin in ["xdist", "randomly", *plugins] for arg in ("-p", plugin)]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run_shown(python, "-m", "pytest", *enabled, "tests", cwd=folder, env=env, log=log)


class Lane:
    """A clean virtual environment with the third-party requirements, and a folder of its
    own: it runs scenarios one after the other, the family uninstalled in between."""

    def __init__(self, work: Path, dist: Path, version: str, tests: bool) -> None:
        self.work, self.dist, self.version, self.tests = work, dist, version, tests
        work.mkdir()
        run(sys.executable, "-m", "venv", work / "venv")
        self.python = work / "venv" / "bin" / "python"
        tools = TEST_TOOLS if tests else []
        # no compiling of every module installed (torch's thousands: 14 s of CPU); Python
        # compiles and caches the ones the runs import
        run(self.python, "-m", "pip", "install", "-q", "--no-compile", "-c",
                   REPO / "constraints.txt", *THIRD_PARTY, *tools)  # fmt: skip
        where = "import sysconfig; print(sysconfig.get_path('purelib'))"
        self.site = Path(run(self.python, "-c", where).strip())

    def scenario(self, requirement: str, expected: set[str], examples: list[str],
                 pages: list[str], log: list[str]) -> None:  # fmt: skip
        """Install ``requirement`` from the wheels, check what it installed, run what
        applies to it, and uninstall the family again (its files must be gone)."""
        python, site, work = self.python, self.site, self.work
        pinned = f"{requirement}=={self.version}"
        log.append(f"\n== pip install --find-links DIST {pinned!r}")
        started = time.perf_counter()
        assert not (site / "pytest_torch").exists(), f"left over: {site / 'pytest_torch'}"
        run(python, "-m", "pip", "install", "-q", "--no-index", "--find-links", self.dist,
                   pinned)  # fmt: skip
        listed = run(python, "-m", "pip", "list", "--format=freeze")
        installed = {
            line.split("==")[0].lower()
            for line in listed.splitlines()
            if line.lower().startswith("pytest-torch")
        }
        if installed != expected:
            raise CheckFailed(f"{requirement}: installed {sorted(installed)}")
        plugins = run(python, "-c", LIST_PLUGINS)
        log.append(f"  installed {sorted(installed)}; pytest plugins {plugins.strip()}")
        names = run(python, "-c", CHECK_NAMES)
        log.append(f"  from pytest_torch import ...: {names.strip()}")
        if pages:
            snippets = [REPO / "scripts" / "doc_snippets.py", *(REPO / "docs" / p for p in pages)]
            shown = run(python, *snippets, cwd=work)
            log.append("  docs " + shown.strip().replace("\n", "\n  docs "))
        if self.tests and "[" not in requirement:
            sdist = self.dist / f"{requirement.replace('-', '_')}-{self.version}.tar.gz"
            run_package_tests(python, requirement, installed, sdist, work, log)
        if examples:
            suite = work / f"examples-{len(installed)}-{requirement.replace('[', '-')[:30]}"
            shutil.copytree(REPO / "examples", suite, ignore=GENERATED_FILES)
            pytest: list[str | Path] = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            if "tests/test_performance.py" in examples:
                run(*pytest, "--torch-update-perf", "tests/test_performance.py",
                           cwd=suite)  # fmt: skip
            summary = run(*pytest, *examples, cwd=suite).strip().splitlines()[-1]
            log.append(f"  examples {' '.join(examples)}: {summary.strip('= ')}")
        run(python, "-m", "pip", "uninstall", "-q", "-y", *sorted(installed))
        _drop_bytecode_left_by_pytest(site / "pytest_torch")
        log.append(f"  ({time.perf_counter() - started:.0f} s)")


def install_and_run(
    dist: Path, work: Path, version: str, *, tests: bool = False, lanes: int = 2
) -> None:
    """The scenarios, longest first, on ``lanes`` clean environments side by side: each
    lane takes the next scenario when it is done with one. Every scenario's output is
    printed whole when it ends; the first failure stops the lanes taking more."""
    step(f"{lanes} clean environment(s): third-party requirements (torch pinned by"
         " constraints.txt); then the scenarios, longest first, side by side")  # fmt: skip
    queue = list(SCENARIOS)
    lock = threading.Lock()
    failures: list[str] = []

    def work_lane(number: int) -> None:
        try:
            lane = Lane(work / f"lane-{number}", dist, version, tests)
        except Exception as exc:  # any error fails the check: a lane never dies quietly
            with lock:
                failures.append(f"lane {number}: its environment: {exc!r}")
            return
        while True:
            with lock:
                if failures or not queue:
                    return
                requirement, expected, examples, pages = queue.pop(0)
            log: list[str] = []
            try:
                lane.scenario(requirement, expected, examples, pages, log)
            except Exception as exc:  # an unexpected error too: the scenario did not pass
                log.append(f"  FAILED: {exc if isinstance(exc, CheckFailed) else repr(exc)}")
                with lock:
                    failures.append(f"{requirement}: {(str(exc).splitlines() or [repr(exc)])[0]}")
            with lock:
                print("\n".join(log), flush=True)

    threads = [threading.Thread(target=work_lane, args=(n,)) for n in range(1, lanes + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise CheckFailed("; ".join(failures))


def _drop_bytecode_left_by_pytest(package: Path) -> None:
    """pip uninstall removes every file it installed; pytest's assertion rewriting
    leaves its own bytecode of the plugin modules, which pip does not know. Anything
    else left over means the family did not uninstall cleanly."""
    if not package.exists():
        return
    left = [p for p in package.rglob("*") if p.is_file() and p.parent.name != "__pycache__"]
    assert not left, f"left over after pip uninstall: {left}"
    shutil.rmtree(package)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it")
    parser.add_argument(
        "--tests", action="store_true", help="each scenario runs its package's own tests"
    )
    parser.add_argument(
        "--lanes", type=int, default=2, help="environments that run scenarios side by side"
    )
    options = parser.parse_args()
    # our lines and the output of the runs shown in between must come in order
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    version = (REPO / "VERSION").read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="pytest-torch-release-"))
    dist = options.keep or work / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    try:
        build(dist)
        step("twine check")
        checked = run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir())
        print("  " + checked.strip().replace("\n", "\n  "))
        check_contents(dist, version)
        envs = work / "envs"
        envs.mkdir()
        install_and_run(dist, envs, version, tests=options.tests, lanes=max(1, options.lanes))
    except CheckFailed as exc:
        sys.exit(f"release check failed: {exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nrelease check passed: {len(PACKAGES)} packages at version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
