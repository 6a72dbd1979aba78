"""Subtests of a repeated body reported once, as in a run without the leak check.

A body with subtests (``self.subTest(...)`` in a ``unittest.TestCase``, pytest's
``subtests`` fixture) reports each one to pytest every time it runs; repeated up to six
times by the leak check, pytest would count six times the subtests of a plain run. While
the check repeats the body, a subtest's report is passed on only the first time its
outcome is seen: its count stays that of a plain run, and a subtest that fails only in
a later run is still reported, once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class Seen:
    """The subtest outcomes reported so far; set :attr:`repeating` once the first run is
    over (the first run reports everything, as a plain run does)."""

    def __init__(self) -> None:
        self.keys: set[tuple[str, str, bool]] = set()
        self.repeating = False

    def first(self, message: object, params: Any, failed: bool) -> bool:
        key = (repr(message), repr(sorted(dict(params or {}).items())), failed)
        if self.repeating and key in self.keys:
            return False
        self.keys.add(key)
        return True


class _ReportOnce:
    """A hook relay that passes on each subtest report the first time only."""

    def __init__(self, relay: Any, seen: Seen) -> None:
        self._relay = relay
        self._seen = seen

    def pytest_runtest_logreport(self, report: Any) -> Any:
        context = getattr(report, "context", None)
        if context is not None and not self._seen.first(
            context.msg, context.kwargs, bool(report.failed)
        ):
            return None
        return self._relay.pytest_runtest_logreport(report=report)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._relay, name)


@contextlib.contextmanager
def reported_once(item: pytest.Item) -> Iterator[Seen]:
    """While the block repeats ``item``'s body, each of its subtests is reported once per
    outcome after the first run (the block sets ``repeating`` on what it gets)."""
    seen = Seen()
    restore: list[Callable[[], object]] = []
    add = getattr(item, "addSubTest", None)  # the unittest result pytest hands unittest
    if add is not None:

        def add_once(test_case: Any, test: Any, exc_info: Any) -> None:
            message = getattr(test, "_message", None)
            if seen.first(message, getattr(test, "params", None), exc_info is not None):
                add(test_case, test, exc_info)

        item.__dict__["addSubTest"] = add_once
        restore.append(lambda: item.__dict__.pop("addSubTest", None))
    fixture = getattr(item, "funcargs", {}).get("subtests")
    relay = getattr(fixture, "_ihook", None)
    if relay is not None:
        fixture._ihook = _ReportOnce(relay, seen)  # type: ignore[union-attr]
        restore.append(lambda: setattr(fixture, "_ihook", relay))
    try:
        yield seen
    finally:
        for undo in restore:
            undo()
