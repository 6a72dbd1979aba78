"""Notes under a failure: what pytest-torch-ci could not do is told in a section
``pytest-torch-ci`` of the failed test's report, never by replacing or chaining the
user's exception."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.ci.artifacts import reason

if TYPE_CHECKING:
    import pytest

#: the report's notes as plain strings (they travel through xdist)
NOTES_ATTRIBUTE = "torch_ci_notes"
NOTES_TITLE = "pytest-torch-ci"


def why(problem: BaseException) -> str:
    """``Type: first line of the message`` of what went wrong, for a note."""
    return reason(problem)


def add_note(report: pytest.TestReport | pytest.CollectReport, notes: list[str]) -> None:
    """Notes under the failure in the report (and in its text, junit XML, xdist)."""
    text = "\n".join(notes)
    longrepr = report.longrepr
    try:
        longrepr.addsection(NOTES_TITLE, text)  # type: ignore[union-attr]
    except Exception:  # a string or a plugin's own representation
        report.sections.append((NOTES_TITLE, text))
    report.__dict__.setdefault(NOTES_ATTRIBUTE, []).extend(notes)
