"""Aligned text tables for the messages and reports of the family."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple


class ReportTable(NamedTuple):
    """An end-of-run table a plugin offers to the reports other plugins write (see the
    ``pytest_torch_report_tables`` hook): a title, and a function that renders the lines
    when a report is written."""

    title: str
    render: Callable[[], list[str]]


def format_table(
    rows: Sequence[Sequence[str]],
    *,
    left: Collection[int] = (),
    rule: bool = False,
    indent: str = "",
) -> list[str]:
    """Lines of ``rows`` in columns two spaces apart.

    Columns are right-aligned (numbers) except those in ``left``; ``rule`` puts a line
    of dashes under the first row (the header). Trailing spaces are dropped.
    """
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [
            cell.ljust(width) if column in left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
        if rule and index == 0:
            lines.append(indent + "  ".join("-" * width for width in widths))
    return lines
