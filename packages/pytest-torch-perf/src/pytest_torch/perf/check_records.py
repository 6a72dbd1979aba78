"""Results of perf checks as they travel to the end-of-run table and to JUnit XML.

Each result is stored in the test report's ``user_properties`` as flat, readable
properties (``torch_perf.<label>.<field>``), which pytest writes into JUnit XML and
pytest-xdist carries from workers to the controller; the table is rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from pytest_torch.core.properties import decode, encode, number

PREFIX = "torch_perf."
_NUMBERS = (
    "measured_ms",
    "reference_ms",
    "change_pct",
    "spread_pct",
    "peak_memory_mb",
    "instructions",
    "reference_instructions",
)


@dataclass
class PerfRecord:
    """One line of the end-of-run table."""

    label: str
    check: str  # "budget", "baseline" or "instructions"
    stat: str
    measured_ms: float | None  # None when nothing was compared
    verdict: str
    reference_ms: float | None = None  # the budget or the baseline
    change_pct: float | None = None
    spread_pct: float | None = None
    peak_memory_mb: float | None = None
    #: instructions per call, and the baseline's (--torch-perf-measure=instructions)
    instructions: float | None = None
    reference_instructions: float | None = None

    def to_properties(self) -> list[tuple[str, object]]:
        figures = {name: getattr(self, name) for name in _FIELDS}
        return encode(PREFIX, self.label, figures)

    @classmethod
    def from_properties(cls, properties: Iterable[tuple[str, object]]) -> list[PerfRecord]:
        records = []
        for label, values in decode(properties, PREFIX).items():
            if not {"check", "stat", "verdict"} <= values.keys():
                continue  # not one of ours
            data = {name: values.get(name) for name in _FIELDS}
            figures = {name: number(data[name]) for name in _NUMBERS if data[name] is not None}
            if None in figures.values():
                continue  # a figure that is no number: not one of ours
            records.append(cls(label=label, **{**data, **figures}))  # type: ignore[arg-type]
        return records


_FIELDS = tuple(item.name for item in fields(PerfRecord) if item.name != "label")


def _share(fraction: float) -> str:
    """0.002 -> "0.2 %", 0.46 -> "46 %": small shares keep a significant digit."""
    percent = 100 * fraction
    return f"{percent:.1f} %" if percent < 10 else f"{percent:.0f} %"


def fmt_count(count: float) -> str:
    """2025376 -> "2,025,376 instr" (every digit: a 1 % change must show)."""
    return f"{count:,.0f} instr"


def _figures(record: PerfRecord) -> tuple[str, str]:
    """The measured and reference cells: milliseconds, or instructions per call."""
    from pytest_torch.perf.measure.timing import fmt_ms

    if record.check == "instructions":
        measured = "-" if record.instructions is None else fmt_count(record.instructions)
        reference = record.reference_instructions
        return measured, "-" if reference is None else fmt_count(reference)
    measured = "-" if record.measured_ms is None else fmt_ms(record.measured_ms)
    return measured, "-" if record.reference_ms is None else fmt_ms(record.reference_ms)


def render_table(records: list[PerfRecord]) -> list[str]:
    """An aligned table with units, one row per record."""
    from pytest_torch.core.tables import format_table

    header = ("test", "check", "statistic", "measured", "reference", "vs reference", "verdict")
    rows = [header]
    for record in records:
        measured, reference = _figures(record)
        digits = 2 if record.check == "instructions" else 1  # counts move by tenths of a %
        change = "-" if record.change_pct is None else f"{record.change_pct:+.{digits}f} %"
        if record.check == "budget" and record.measured_ms is not None and record.reference_ms:
            change = f"{_share(record.measured_ms / record.reference_ms)} of budget"
        rows.append(
            (
                record.label,
                record.check,
                record.stat,
                measured,
                reference,
                change,
                record.verdict,
            )
        )
    return format_table(rows, left=(0, 1, 2, 6), rule=True)
