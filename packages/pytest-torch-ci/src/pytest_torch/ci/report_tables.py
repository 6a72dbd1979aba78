"""The end-of-run tables the sibling plugins offer (core's ``pytest_torch_report_tables``
hook), gathered for the job summary and the pytest-html report."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.ci.notes import why

if TYPE_CHECKING:
    import pytest


def gather(config: pytest.Config) -> tuple[dict[str, list[str]], list[str]]:
    """The rendered tables by title, and a note per one that could not be built."""
    tables: dict[str, list[str]] = {}
    notes: list[str] = []
    try:
        offered = config.hook.pytest_torch_report_tables(config=config)
    except Exception as problem:
        return tables, [f"the plugins' tables could not be gathered ({why(problem)})"]
    for table in (table for answer in offered if answer for table in answer):
        try:
            lines = table.render()
        except Exception as problem:
            notes.append(f"the {table.title.lower()} table could not be built ({why(problem)})")
            continue
        if lines:
            tables[table.title] = lines
    return tables, notes
