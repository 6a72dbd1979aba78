"""Unit tests of the user-code site finder (core/sites.py)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import sysconfig
import traceback
from pathlib import Path

import _pytest.python
import pytest
import torch

from pytest_torch.core import sites
from pytest_torch.core.sites import Site, is_internal, site_of, site_of_stack

HERE = str(Path(__file__).resolve())


def test_the_user_line_is_the_innermost_outside_torch_the_family_and_the_stdlib():
    def from_the_stdlib():
        # the hook starts looking in json.decoder, which called it
        return json.loads("{}", object_hook=lambda _: site_of(sys._getframe(1)))

    site = from_the_stdlib()
    assert site is not None
    assert (site.filename, site.function) == (HERE, "from_the_stdlib")
    assert site.source == 'return json.loads("{}", object_hook=lambda _: site_of(sys._getframe(1)))'
    assert site.via == ""


@pytest.mark.parametrize(
    "filename",
    ["<string>", torch.__file__, sites.__file__, json.__file__, _pytest.python.__file__],
)
def test_internal_code(filename):
    assert is_internal(filename)


def test_the_users_code_and_installed_packages_are_not_internal(tmp_path):
    assert not is_internal(HERE)
    assert not is_internal(str(tmp_path / "train.py"))
    stdlib = sysconfig.get_paths()["stdlib"]
    assert not is_internal(os.path.join(stdlib, "site-packages", "lib", "x.py"))


@pytest.fixture
def library(tmp_path, monkeypatch):
    """An installed library (in a site-packages folder) that calls back into torch."""
    folder = tmp_path / "site-packages" / "fakelib"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(
        "import sys\ndef work(find):\n    return find(sys._getframe())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    return importlib.import_module("fakelib")


def test_past_an_installed_library_to_the_users_line(library):
    site = library.work(site_of)  # the user's line
    assert site is not None
    assert (site.filename, site.source) == (HERE, "site = library.work(site_of)  # the user's line")
    assert site.via == f"fakelib{os.sep}__init__.py:3"
    assert site.describe().endswith(f" (in fakelib{os.sep}__init__.py:3)")


def test_the_same_rule_reads_a_recorded_stack(library):
    stack = library.work(lambda frame: traceback.extract_stack(frame))
    site = site_of_stack(stack)
    assert site is not None
    assert (site.filename, site.via) == (HERE, f"fakelib{os.sep}__init__.py:3")
    assert site.source == "stack = library.work(lambda frame: traceback.extract_stack(frame))"
    assert site_of_stack(stack[-1:]) == Site(  # only the library: its own line
        stack[-1].filename, 3, "return find(sys._getframe())"
    )
    assert site_of_stack([traceback.FrameSummary("<string>", 1, "f")]) is None


def test_no_user_line_at_all():
    assert site_of(None) is None
    assert site_of_stack([]) is None


def test_describe(tmp_path):
    path = str(tmp_path / "models" / "train.py")
    site = Site(path, 12, "loss = model(x)", function="step")
    assert site.describe() == f"{path}:12 in step(): `loss = model(x)`"
    relative = os.path.join("models", "train.py")
    assert site.describe(str(tmp_path)) == f"{relative}:12 in step(): `loss = model(x)`"
    assert site.describe(str(tmp_path / "elsewhere")) == site.describe()
    assert Site(path, 3).describe() == f"{path}:3"
    assert Site(path, 3, function="a") == Site(path, 3, function="b"), "the line, not the name"
