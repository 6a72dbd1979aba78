"""Explanations added to a test's failure report by the family's plugins."""

from __future__ import annotations

import pytest


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Add ``text`` under the failure, after the error's own message, titled ``title``:
    shown whatever ``--show-capture`` says, and carried to the xdist controller and
    JUnit XML with the report."""
    longrepr = report.longrepr
    add = getattr(longrepr, "addsection", None)  # a traceback's representation
    if add is not None:
        add(title, text)
    elif isinstance(longrepr, str):
        report.longrepr = f"{longrepr}\n{'-' * 10} {title} {'-' * 10}\n{text}"
    else:
        report.sections.append((title, text))
