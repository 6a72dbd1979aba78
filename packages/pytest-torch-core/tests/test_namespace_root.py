"""The namespace root ``pytest_torch/__init__.py`` ships in core: every installed
feature's public names at ``pytest_torch`` (``from pytest_torch import *`` included,
with core alone or beside any one feature), a clear ImportError for the others; and
each package's own declaration of its names (``EXPORTS``, ``__all__`` and the imports
under ``TYPE_CHECKING``) says the same three times."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_torch
from pytest_torch.core.exports import distribution_of, installed_packages, package_of

CORE_SRC = Path(__file__).resolve().parents[1] / "src"


def type_checking_imports(init_file: str) -> dict[str, str]:
    """Name -> module of the ``from M import N as N`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    assert alias.asname == alias.name, (
                        f"{init_file}: write 'from {statement.module} import {alias.name} as"
                        f" {alias.name}' so that type checkers see it re-exported"
                    )
                    found[alias.name] = str(statement.module)
    return found


def test_the_root_is_cores_and_starts_with_extend_path():
    root = Path(pytest_torch.__file__).resolve()
    assert root == CORE_SRC / "pytest_torch" / "__init__.py" or root.parent.parent.name in (
        "site-packages",
        "dist-packages",
    ), root
    assert (root.parent / "py.typed").exists()
    first = root.read_text().splitlines()[0]
    assert first == '__path__ = __import__("pkgutil").extend_path(__path__, __name__)'


def test_every_name_resolves_or_names_the_distribution_to_install():
    installed = installed_packages()
    served = []
    for name, distribution in pytest_torch.DISTRIBUTIONS.items():
        package = package_of(distribution)
        if package in installed:
            value = getattr(pytest_torch, name)
            assert value is getattr(importlib.import_module(package), name), name
            assert name in dir(pytest_torch)
            served.append(name)
        else:
            with pytest.raises(ImportError, match=f"is part of {distribution}, which is not"):
                exec(f"from pytest_torch import {name}", {})
            assert name not in dir(pytest_torch)
    assert pytest_torch.__all__ == sorted(served)


def test_reexports_are_cached_and_unknown_names_fail_clearly():
    from pytest_torch import assert_close

    assert pytest_torch.__dict__["assert_close"] is assert_close
    with pytest.raises(AttributeError, match="has no attribute 'assert_nothing'"):
        pytest_torch.assert_nothing  # noqa: B018


def test_importing_and_listing_the_root_does_not_import_torch():
    code = (
        "import sys, pytest_torch; from pytest_torch import assert_close;"
        " dir(pytest_torch); pytest_torch.__all__; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("package", installed_packages())
def test_a_package_declares_the_same_names_three_times(package):
    """``EXPORTS`` (what is served), ``__all__`` (what ``import *`` takes) and the
    imports under ``TYPE_CHECKING`` (what type checkers read) agree, and each name is
    what its module defines."""
    module = importlib.import_module(package)
    exports = module.EXPORTS
    assert exports == type_checking_imports(str(module.__file__))
    assert sorted(module.__all__) == sorted(exports)
    for name, source in exports.items():
        assert source.startswith(f"{package}."), f"{name} comes from another package"
        assert getattr(module, name) is getattr(importlib.import_module(source), name)
        assert name in dir(module)


def test_the_root_declares_what_the_installed_packages_declare():
    """A package declares its names once; the root's map of distributions and its
    imports for type checkers must say the same."""
    root = pytest_torch.DISTRIBUTIONS
    typed = type_checking_imports(pytest_torch.__file__)
    assert typed == {name: package_of(distribution) for name, distribution in root.items()}
    seen: set[str] = set()
    for package in installed_packages():
        own = importlib.import_module(package).EXPORTS
        assert not seen & set(own), f"{package} declares a name another package declares"
        seen |= set(own)
        from_root = sorted(name for name, d in root.items() if d == distribution_of(package))
        assert from_root == sorted(own), f"the root gives {distribution_of(package)} {from_root}"
    assert "pytest_torch.core" in installed_packages()


# -- with only part of the family installed -----------------------------------------------
#
# Each case runs a fresh Python whose ``pytest_torch`` namespace holds core and at most
# one feature package: a folder made of links to the installed root, core and that
# package, and every other folder of this environment without its ``pytest_torch``
# (``-S``: no ``.pth`` file puts the other editable packages back). The child prints what
# it sees: the root must serve exactly core's and that package's names, and name the
# distribution to install for every other one.

FEATURES = ("perf", "memory", "determinism", "xdist", "ci", "distributed")

CHILD = """
import json, sys
import pytest_torch
listed = {"all": pytest_torch.__all__, "dir": dir(pytest_torch)}
torch_on_listing = "torch" in sys.modules
star = {}
exec("from pytest_torch import *", star)
missing = {}
for name in pytest_torch.DISTRIBUTIONS:
    if name not in star:
        try:
            exec(f"from pytest_torch import {name}", {})
        except ImportError as error:
            missing[name] = str(error)
        else:
            missing[name] = "imported"
print(json.dumps({
    "path": list(pytest_torch.__path__),
    "packages": sorted(m for m in sys.modules if m.count(".") == 1 and m.startswith("pytest_torch.")),
    "torch_on_listing": torch_on_listing,
    "star": sorted(name for name in star if name != "__builtins__"),
    "missing": missing,
    **listed,
}))
"""


def _installed_dir(package: str) -> Path:
    spec = importlib.util.find_spec(f"pytest_torch.{package}")
    if spec is None or spec.origin is None:
        pytest.skip(f"pytest_torch.{package} is not installed here")
    return Path(spec.origin).parent


def _alone(folder: Path, feature: str | None) -> list[str]:
    """``sys.path`` for a Python that has core and ``feature`` of the family, and
    everything else of this environment but the family."""
    portion = folder / "family" / "pytest_torch"
    portion.mkdir(parents=True)
    (portion / "__init__.py").symlink_to(Path(pytest_torch.__file__).resolve())
    for package in ("core", feature) if feature else ("core",):
        (portion / package).symlink_to(_installed_dir(package))
    path = [str(portion.parent)]
    for number, entry in enumerate(sys.path):
        if not entry or not os.path.isdir(entry):
            continue
        if not os.path.isdir(os.path.join(entry, "pytest_torch")):
            path.append(entry)
            continue
        # the family installed here (or one editable package's src): all but it
        without = folder / f"without-family-{number}"
        without.mkdir()
        for child in os.listdir(entry):
            if child != "pytest_torch" and not child.endswith(".pth"):
                (without / child).symlink_to(os.path.join(entry, child))
        path.append(str(without))
    return path


def _run_alone(folder: Path, feature: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join(_alone(folder, feature))
    env["PYTHONNOUSERSITE"] = "1"
    done = subprocess.run(
        [sys.executable, "-S", "-c", CHILD], capture_output=True, text=True, env=env, cwd=folder
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("feature", [None, *FEATURES])
def test_import_star_serves_the_installed_packages_names_only(tmp_path, feature):
    seen = _run_alone(tmp_path, feature)
    present = {"core", feature} if feature else {"core"}
    portion = tmp_path / "family" / "pytest_torch"
    assert seen["path"] == [str(portion)], "another part of the family leaked in"
    wanted = {f"pytest-torch-{package}" for package in present}
    expected = sorted(n for n, d in pytest_torch.DISTRIBUTIONS.items() if d in wanted)
    assert seen["star"] == expected
    assert seen["all"] == expected
    assert sorted(set(seen["dir"]) & set(pytest_torch.DISTRIBUTIONS)) == expected
    assert not seen["torch_on_listing"], "import pytest_torch, __all__ or dir() imported torch"
    assert {p.removeprefix("pytest_torch.") for p in seen["packages"]} == present
    absent = set(pytest_torch.DISTRIBUTIONS) - set(expected)
    assert set(seen["missing"]) == absent
    for name, message in seen["missing"].items():
        distribution = pytest_torch.DISTRIBUTIONS[name]
        assert message.startswith(
            f"pytest_torch.{name} is part of {distribution}, which is not installed:"
        ), message
        assert distribution != distribution_of(f"pytest_torch.{feature}")
