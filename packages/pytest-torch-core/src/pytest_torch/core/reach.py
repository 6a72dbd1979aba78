"""Which tests each of the family's checks acted on, told at the end of the run.

A check that cannot act on a test says so here instead of passing it in silence: a
marker on a ``unittest.TestCase`` method that cannot request the fixture the check
needs, a run-wide switch meeting an async body or a doctest. A run-wide switch
(``--torch-leak-check``) also notes every test it did check, so the end of the run says
how many it covered even when it covered them all::

    torch: --torch-leak-check checked 60 of the 66 test bodies that ran; not checked:
      4 tests: async test bodies ... (test_io.py::test_fetch, ... and 2 more)

Notes are kept in the test's stash while it runs and travel on its teardown report as a
plain attribute (so xdist hands them to the controller), where :class:`Reach` adds them
up for the session. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

#: (check, why it could not act, or "" where it did) noted for the running test
_notes_key = pytest.StashKey[dict[str, str]]()
#: the teardown report's attribute that carries a test's notes
REPORT_ATTRIBUTE = "torch_reach"
#: test ids named after a reason before "and N more"
SHOWN_TESTS = 3


def acted(item: pytest.Item, check: str) -> None:
    """``check`` (an option such as ``--torch-leak-check`` or a marker such as
    ``@pytest.mark.torch_max_memory``) acted on this test."""
    item.stash.setdefault(_notes_key, {})[check] = ""


def not_acted(item: pytest.Item, check: str, why: str) -> None:
    """``check`` could not act on this test; ``why`` completes "N tests: ..." and says
    what to do, e.g. ``"async test bodies: ... cannot repeat them"``."""
    item.stash.setdefault(_notes_key, {})[check] = why


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put the test's notes on its teardown report."""
    notes = item.stash.get(_notes_key, None)
    if report.when == "teardown" and notes:
        report.__dict__[REPORT_ATTRIBUTE] = sorted(notes.items())


class Reach:
    """The session's notes, from this process's reports or its xdist workers'."""

    def __init__(self) -> None:
        #: check -> test ids it acted on
        self.acted: dict[str, list[str]] = {}
        #: check -> why -> test ids it could not act on
        self.missed: dict[str, dict[str, list[str]]] = {}

    def add(self, report: Any) -> None:
        for check, why in getattr(report, REPORT_ATTRIBUTE, None) or ():
            if why:
                self.missed.setdefault(check, {}).setdefault(why, []).append(report.nodeid)
            else:
                self.acted.setdefault(check, []).append(report.nodeid)

    def lines(self) -> list[str]:
        """One line per check, and one per reason it could not act: run-wide switches
        (``--...``) always, markers only where they missed a test."""
        found = []
        for check in sorted(set(self.acted) | set(self.missed)):
            missed = self.missed.get(check, {})
            if not missed and not check.startswith("--"):
                continue
            found += _check_lines(check, len(self.acted.get(check, ())), missed)
        return found


def _tests(count: int) -> str:
    return f"{count} test{'s' if count != 1 else ''}"


def _check_lines(check: str, acted: int, missed: dict[str, list[str]]) -> list[str]:
    total = acted + sum(len(tests) for tests in missed.values())
    ran = f"{total} test bod{'ies' if total != 1 else 'y'} that ran"
    if not missed:
        return [
            f"torch: {check} checked all {ran}"
            if total != 1
            else f"torch: {check} checked the {ran}"
        ]
    if acted:
        head = f"torch: {check} checked {acted} of the {ran}; not checked:"
    elif total == 1:
        head = f"torch: {check} checked none of the tests that ran (1 test body):"
    else:
        head = f"torch: {check} checked none of the {ran}:"
    lines = [head]
    for why, tests in sorted(missed.items(), key=lambda pair: (-len(pair[1]), pair[0])):
        lines.append(f"  {_tests(len(tests))}: {why} ({_named(tests)})")
    return lines


def _named(tests: Iterable[str]) -> str:
    tests = sorted(tests)
    shown = ", ".join(tests[:SHOWN_TESTS])
    more = len(tests) - SHOWN_TESTS
    return f"{shown}, ... and {more} more" if more > 0 else shown
