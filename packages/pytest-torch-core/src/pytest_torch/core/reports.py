"""Explanations added to a test's failure report by the family's plugins.

:func:`add_section` puts an explanation under the failure (terminal, JUnit XML) and
records it on the report as plain data, which travels with the report to the xdist
controller; :func:`explanations` reads it back, for reporters (the CI plugin's GitHub
annotations and job summary) that show failures elsewhere than in the terminal.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

#: the report attribute holding ``[{"title": ..., "text": ...}, ...]`` (JSON-able, so
#: it crosses to the xdist controller with the report)
EXPLANATIONS_ATTRIBUTE = "torch_explanations"


class Explanation(NamedTuple):
    """One section a plugin added to a failure: its title and its text."""

    title: str
    text: str


def _in_string(title: str, text: str) -> str:
    """How a section is appended to a report whose representation is a string."""
    return f"\n{'-' * 10} {title} {'-' * 10}\n{text}"


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Add ``text`` under the failure, after the error's own message, titled ``title``:
    shown whatever ``--show-capture`` says, and carried to the xdist controller and
    JUnit XML with the report. It is also recorded for :func:`explanations`."""
    longrepr = report.longrepr
    add = getattr(longrepr, "addsection", None)  # a traceback's representation
    if add is not None:
        add(title, text)
    elif isinstance(longrepr, str):
        report.longrepr = longrepr + _in_string(title, text)
    else:
        report.sections.append((title, text))
    recorded = report.__dict__.get(EXPLANATIONS_ATTRIBUTE)
    if not isinstance(recorded, list):
        recorded = report.__dict__[EXPLANATIONS_ATTRIBUTE] = []
    recorded.append({"title": str(title), "text": str(text)})


def explanations(report: Any) -> list[Explanation]:
    """The sections :func:`add_section` added to ``report``, oldest first (also on the
    xdist controller); entries that are not what it records are left out."""
    recorded = getattr(report, EXPLANATIONS_ATTRIBUTE, None)
    if not isinstance(recorded, list):
        return []
    found = []
    for entry in recorded:
        if isinstance(entry, dict):
            title, text = entry.get("title"), entry.get("text")
            if isinstance(title, str) and isinstance(text, str):
                found.append(Explanation(title, text))
    return found


def without_explanations(text: str, report: Any) -> str:
    """``text``, a report's string representation, without the sections
    :func:`add_section` appended to it (a reporter that shows them on their own)."""
    for title, body in explanations(report):
        text = text.replace(_in_string(title, body), "")
    return text
