"""The end-of-run lines on which tests each check acted on, and the commands and test
kinds they rest on."""

from __future__ import annotations

import random
import types

import pytest
import torch

from pytest_torch.core import seeding
from pytest_torch.core.reach import REPORT_ATTRIBUTE, Reach
from pytest_torch.core.rerun import nodeid_from_start, rerun_command
from pytest_torch.core.testkinds import is_unittest, kind_of


def _report(nodeid: str, *notes: tuple[str, str]) -> types.SimpleNamespace:
    return types.SimpleNamespace(nodeid=nodeid, **{REPORT_ATTRIBUTE: list(notes)})


def test_a_switch_always_says_how_many_tests_it_checked():
    reach = Reach()
    for n in range(3):
        reach.add(_report(f"t.py::test_{n}", ("--torch-leak-check", "")))
    assert reach.lines() == ["torch: --torch-leak-check checked all 3 test bodies that ran"]
    reach = Reach()
    reach.add(_report("t.py::test_0", ("--torch-leak-check", "")))
    assert reach.lines() == ["torch: --torch-leak-check checked the 1 test body that ran"]


def test_tests_a_check_missed_are_counted_by_reason_and_named():
    reach = Reach()
    reach.add(_report("t.py::test_a", ("--torch-leak-check", "")))
    for n in range(5):
        reach.add(_report(f"t.py::test_async_{n}", ("--torch-leak-check", "the body is async")))
    reach.add(_report("t.py::test_doc", ("--torch-leak-check", "no Python body")))
    reach.add(_report("t.py::test_quiet"))  # a test without notes
    assert reach.lines() == [
        "torch: --torch-leak-check checked 1 of the 7 test bodies that ran; not checked:",
        "  5 tests: the body is async (t.py::test_async_0, t.py::test_async_1,"
        " t.py::test_async_2, ... and 2 more)",
        "  1 test: no Python body (t.py::test_doc)",
    ]


def test_a_marker_is_named_only_where_it_missed_a_test():
    reach = Reach()
    reach.add(_report("t.py::test_a", ("@pytest.mark.torch_max_latency", "")))
    assert reach.lines() == []
    reach.add(_report("t.py::T::test_b", ("@pytest.mark.torch_max_latency", "unittest")))
    reach.add(_report("t.py::T::test_c", ("@pytest.mark.torch_memory_leak", "unittest async")))
    assert reach.lines() == [
        "torch: @pytest.mark.torch_max_latency checked 1 of the 2 test bodies that ran;"
        " not checked:",
        "  1 test: unittest (t.py::T::test_b)",
        "torch: @pytest.mark.torch_memory_leak checked none of the tests that ran (1 test body):",
        "  1 test: unittest async (t.py::T::test_c)",
    ]


class _Config:
    def __init__(self, rootpath, start, args=()):
        self.rootpath = rootpath
        self.invocation_params = types.SimpleNamespace(dir=start, args=args)


def test_the_rerun_command_names_the_test_from_where_pytest_was_started(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    config = _Config(tmp_path, tmp_path / "tests")
    node = "tests/test_aug.py::test_flip[a b]"
    assert nodeid_from_start(config, node) == "test_aug.py::test_flip[a b]"
    assert rerun_command(config, node, ["--torch-seed=7"]) == (
        "pytest 'test_aug.py::test_flip[a b]' --torch-seed=7"
    )
    assert nodeid_from_start(_Config(tmp_path, tmp_path), node) == node
    elsewhere = _Config(tmp_path / "a", tmp_path / "b")
    assert nodeid_from_start(elsewhere, "t.py::test_x") == "../a/t.py::test_x"


def test_the_rerun_command_keeps_the_plugins_where_autoload_is_off(tmp_path, monkeypatch):
    config = _Config(tmp_path, tmp_path, ("-p", "torch_core", "-pxdist", "-q", "t.py"))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert rerun_command(config, "t.py::test_x") == "pytest -p torch_core -p xdist t.py::test_x"
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    assert rerun_command(config, "t.py::test_x") == "pytest t.py::test_x"


def test_test_kinds(pytester):
    pytester.makepyfile(
        """
        import unittest

        def test_plain():
            pass

        class TestPlain:
            def test_method(self):
                pass

        class TestCase(unittest.TestCase):
            def test_case(self):
                pass

        def double(x):
            '''
            >>> double(1)
            2
            '''
            return 2 * x
        """
    )
    items, _ = pytester.inline_genitems("--doctest-modules")
    kinds = {item.name: (isinstance(item, pytest.Function), is_unittest(item)) for item in items}
    assert kinds == {
        "test_plain": (True, False),
        "test_method": (True, False),
        "test_case": (True, True),  # a Function that pytest hands to unittest
        "test_test_kinds.double": (False, False),
    }
    doctest = next(item for item in items if item.name.endswith("double"))
    assert kind_of(doctest) == "doctests"


@pytest.mark.usefixtures("torch_seed")
def test_drawn_since_names_the_generators_that_moved():
    before = seeding.capture()
    assert seeding.drawn_since(before) == []
    torch.rand(2)
    random.random()
    assert seeding.drawn_since(before) == ["Python's random", "torch's CPU generator"]
    seeding.restore(before)
    assert seeding.drawn_since(before) == []
