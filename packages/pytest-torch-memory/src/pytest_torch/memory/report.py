"""Measured peaks as they travel to the end-of-run table and to JUnit XML.

A test's peaks are stored in its report's ``user_properties`` as flat, readable
properties (``torch_memory.<device>.peak_mib``, ``...at_start_mib``, and
``torch_memory.budget_mib``), which pytest writes into JUnit XML and pytest-xdist
carries from workers to the controller; the table is rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from pytest_torch.core.memory import format_bytes
from pytest_torch.core.tables import format_table

if TYPE_CHECKING:
    from pytest_torch.core.memory import PeakMemory
    from pytest_torch.memory.budgets import MemoryBudget

PREFIX = "torch_memory."
MIB = 2**20


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
            properties.append((f"{PREFIX}{device}.peak_mib", round(peak.peak / MIB, 6)))
            properties.append((f"{PREFIX}{device}.at_start_mib", round(peak.at_start / MIB, 6)))
            if budget is not None and budget.applies_to(device):
                properties.append((f"{PREFIX}{device}.budget_mib", budget.mb))
        return properties

    @classmethod
    def from_properties(
        cls, test: str, properties: Iterable[tuple[str, object]]
    ) -> list[PeakRecord]:
        values: dict[str, dict[str, float]] = {}
        for name, value in properties:
            if not name.startswith(PREFIX):
                continue
            device, _, field = name[len(PREFIX) :].rpartition(".")
            try:
                values.setdefault(device, {})[field] = float(str(value))
            except ValueError:
                continue
        return [
            cls(
                test,
                device,
                round(fields["peak_mib"] * MIB),
                round(fields.get("at_start_mib", 0.0) * MIB),
                fields.get("budget_mib"),
            )
            for device, fields in sorted(values.items())
            if "peak_mib" in fields
        ]


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
            f" per device; see --torch-memory-top)"
        )
    return lines
