"""Unit tests of the aligned table helper."""

from __future__ import annotations

from pytest_torch.core.tables import format_table


def test_columns_align_right_by_default_and_left_where_asked():
    rows = [("name", "ms"), ("a", "1.5"), ("longer", "12")]
    assert format_table(rows) == ["  name   ms", "     a  1.5", "longer   12"]
    assert format_table(rows, left=(0,), rule=True, indent="  ") == [
        "  name     ms",
        "  ------  ---",
        "  a       1.5",
        "  longer   12",
    ]
