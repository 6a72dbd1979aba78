"""Measured peaks as they travel to the end-of-run table and to JUnit XML.

A test's peaks are stored in its report's ``user_properties`` as flat, readable
properties (``torch_memory.<device>.peak_mib``, ``...at_start_mib`` and, where a budget
applies, ``...budget_mib``; see :mod:`pytest_torch.core.properties`), which pytest writes
into JUnit XML and pytest-xdist carries from workers to the controller; the table is
rebuilt from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from pytest_torch.core.peaks import format_bytes
from pytest_torch.core.properties import decode, encode, number
from pytest_torch.core.tables import format_table
from pytest_torch.core.units import MIB
from pytest_torch.memory.options import MEMORY_TOP

if TYPE_CHECKING:
    from pytest_torch.core.peaks import PeakMemory
    from pytest_torch.memory.budgets import MemoryBudget

PREFIX = "torch_memory."


class PeakRecord(NamedTuple):
    test: str
    device: str
    peak: int
    at_start: int
    #: the budget in MiB when one applies to this device
    budget_mb: float | None

    @staticmethod
    def to_properties(
        results: Mapping[str, PeakMemory], budget: MemoryBudget | None
    ) -> list[tuple[str, object]]:
        properties: list[tuple[str, object]] = []
        for device, peak in sorted(results.items()):
            figures = {"peak_mib": peak.peak / MIB, "at_start_mib": peak.at_start / MIB}
            properties += encode(PREFIX, device, figures)
            if budget is not None and budget.applies_to(device):
                # the budget as it was set, not rounded
                properties += encode(PREFIX, device, {"budget_mib": budget.mb}, digits=None)
        return properties

    @classmethod
    def from_properties(
        cls, test: str, properties: Iterable[tuple[str, object]]
    ) -> list[PeakRecord]:
        records = []
        for device, values in sorted(decode(properties, PREFIX).items()):
            figures = {field: number(value) for field, value in values.items()}
            peak, at_start = figures.get("peak_mib"), figures.get("at_start_mib") or 0.0
            if peak is None or not math.isfinite(peak) or not math.isfinite(at_start):
                continue  # no peak, or none that can be shown
            budget = figures.get("budget_mib")
            records.append(cls(test, device, round(peak * MIB), round(at_start * MIB), budget))
        return records


def render_table(records: list[PeakRecord], top: int) -> list[str]:
    """The ``top`` highest peaks per device, with budgets where set."""
    header = ("device", "test", "peak", "at start", "added", "budget", "verdict")
    rows = [header]
    hidden = 0
    for device in sorted({record.device for record in records}):
        ranked = sorted((r for r in records if r.device == device), key=lambda r: (-r.peak, r.test))
        hidden += max(0, len(ranked) - top)
        for record in ranked[:top]:
            budget, verdict = "-", "-"
            if record.budget_mb is not None:
                budget = f"{record.budget_mb:g} MiB"
                over = record.peak > record.budget_mb * MIB
                verdict = "OVER BUDGET" if over else "within budget"
            rows.append(
                (
                    device,
                    record.test,
                    format_bytes(record.peak),
                    format_bytes(record.at_start),
                    format_bytes(max(0, record.peak - record.at_start)),
                    budget,
                    verdict,
                )
            )
    lines = format_table(rows, left=(0, 1, 6), rule=True)
    if hidden:
        lines.append(
            f"({hidden} more measured test(s) not shown: the table keeps the {top} highest"
            f" per device; see {MEMORY_TOP})"
        )
    return lines
