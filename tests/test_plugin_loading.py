"""Loading the plugins: no torch import, -p with autoload off, -p no:... blocking."""

from __future__ import annotations

import textwrap
from importlib import metadata

import pytest


def family_entry_points() -> dict[str, str]:
    """Entry-point name -> distribution, for every installed plugin of the family."""
    found = {}
    for ep in metadata.entry_points(group="pytest11"):
        dist = ep.dist.name if ep.dist else ""
        if dist.startswith("pytest-torch"):
            found[ep.name] = dist
    return dict(sorted(found.items()))


ENTRY_POINTS = family_entry_points()
PLUGIN_ARGS = [arg for name in ENTRY_POINTS for arg in ("-p", name)]

# Runs pytest in-process in a fresh interpreter and reports whether torch got imported.
PROBE = """
import sys, pytest
rc = pytest.main({args!r})
print("TORCH_IMPORTED=%s" % ("torch" in sys.modules))
sys.exit(int(rc))
"""


def test_the_family_is_installed():
    assert "torch_core" in ENTRY_POINTS
    assert ENTRY_POINTS["torch_core"] == "pytest-torch-core"


@pytest.mark.parametrize("autoload", [True, False], ids=["autoload", "explicit-p"])
@pytest.mark.parametrize(
    "args",
    [["--help"], ["--markers"], ["-q"]],
    ids=["help", "markers", "torch-free-suite"],
)
def test_loading_plugins_never_imports_torch(tmp_path, run_python, autoload, args):
    (tmp_path / "test_plain.py").write_text(
        "def test_one():\n    assert 1 + 1 == 2\n\ndef test_two():\n    assert 'a' in 'abc'\n"
    )
    full = [*args, "-p", "no:cacheprovider"] + ([] if autoload else PLUGIN_ARGS)
    result = run_python(PROBE.format(args=full), autoload=autoload)
    assert "TORCH_IMPORTED=False" in result.stdout, result.stdout[-2000:]
    if args == ["--help"]:
        assert "--torch-seed" in result.stdout  # the plugins really were loaded
    if args == ["-q"]:
        assert "2 passed" in result.stdout


def test_autoload_off_enables_exactly_the_plugins_named_with_p(run_python):
    plain = run_python("import pytest; pytest.main(['--help'])", autoload=False)
    assert "--torch-seed" not in plain.stdout
    core = run_python("import pytest; pytest.main(['--help', '-p', 'torch_core'])", autoload=False)
    assert "--torch-seed" in core.stdout
    assert "torch: devices, seeds and tensors" in core.stdout


def test_p_no_blocks_a_plugin(run_python):
    blocked = run_python("import pytest; pytest.main(['--help', '-p', 'no:torch_core'])")
    assert "--torch-seed" not in blocked.stdout
    loaded = run_python("import pytest; pytest.main(['--help'])")
    assert "--torch-seed" in loaded.stdout


def test_plugin_modules_import_without_torch(run_python):
    code = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import pytest_torch, pytest_torch.core
        for info in pkgutil.walk_packages(pytest_torch.__path__, "pytest_torch."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        print(sorted(m for m in sys.modules if m.startswith("pytest_torch")))
        print("TORCH_IMPORTED=%s" % ("torch" in sys.modules))
        """
    )
    result = run_python(code)
    assert "'pytest_torch.core.plugin'" in result.stdout
    assert "TORCH_IMPORTED=False" in result.stdout
