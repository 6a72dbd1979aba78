"""What the session's test reports carried back: the measured peaks, for the
end-of-run table, and the leak reports of tests expected to fail (xfail), so a known
leak stays visible until it is fixed.

Reports arrive from this process and, under pytest-xdist, from every worker: the
figures travel in ``user_properties`` (see :mod:`pytest_torch.memory.report`).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_torch.core.properties import values_of
from pytest_torch.memory.report import PeakRecord

#: the user property a failed leak check leaves its report in
LEAK_PROPERTY = "torch_memory_leak_report"
KNOWN_LEAKS_TITLE = "torch memory: known leaks (tests marked xfail)"


class MemoryResults:
    """The peaks and known leaks of a session, kept in ``config.stash[results_key]``."""

    def __init__(self) -> None:
        self.records: list[PeakRecord] = []
        #: (test id, leak report) of tests expected to fail (xfail) that leaked
        self.known_leaks: list[tuple[str, str]] = []

    def add(
        self, nodeid: str, properties: Iterable[tuple[str, object]], expected_failure: bool
    ) -> None:
        """Take the figures of one test's call report. The leak of a test that failed
        unexpectedly is not kept: pytest shows that failure's report already."""
        properties = list(properties)
        self.records += PeakRecord.from_properties(nodeid, properties)
        if expected_failure:
            self.known_leaks += [
                (nodeid, str(leak)) for leak in values_of(properties, LEAK_PROPERTY)
            ]

    def known_leak_lines(self) -> list[str]:
        """The known leaks, each test followed by its indented report."""
        lines = []
        for test, message in self.known_leaks:
            lines.append(f"{test}:")
            lines += [f"  {line}" for line in message.splitlines()]
        return lines


results_key = pytest.StashKey[MemoryResults]()
