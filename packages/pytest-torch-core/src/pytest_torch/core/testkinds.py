"""What kind of test an item is, for checks that act on a test's body.

pytest runs a plain test function through ``pytest_pyfunc_call`` with its fixtures as
arguments; a ``unittest.TestCase`` method is called by unittest itself (``setUp``, the
method, ``tearDown``) and never passes that hook nor ``pytest_generate_tests``; a doctest
or another plugin's item has no Python body at all. A check that wraps a body must know
which it meets, or it silently checks nothing.
"""

from __future__ import annotations

import inspect
import sys

import pytest


def is_unittest(item: pytest.Item) -> bool:
    """A method of a ``unittest.TestCase`` (pytest's ``TestCaseFunction``)."""
    unittest = sys.modules.get("unittest")
    cls = getattr(item, "cls", None)
    return unittest is not None and isinstance(cls, type) and issubclass(cls, unittest.TestCase)


def is_async(item: pytest.Item) -> bool:
    """A test whose body is a coroutine function (run by an async plugin's event loop,
    or by ``unittest.IsolatedAsyncioTestCase``)."""
    body = getattr(item, "obj", None)
    return inspect.iscoroutinefunction(body) or inspect.isasyncgenfunction(body)


def kind_of(item: pytest.Item) -> str:
    """A short name of a test that has no Python body a check can wrap: ``"doctests"``
    or the item's class name (``"MypyFileItem items"``)."""
    name = type(item).__name__
    return "doctests" if name.startswith("Doctest") else f"{name} items"
