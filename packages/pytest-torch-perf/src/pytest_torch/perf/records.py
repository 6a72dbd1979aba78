"""Results of perf checks as they travel to the end-of-run table and to JUnit XML.

Each result is stored in the test report's ``user_properties`` as flat, readable
properties (``torch_perf.<label>.<field>``), which pytest writes into JUnit XML and
pytest-xdist carries from workers to the controller; the table is rebuilt from them.
A record's figures are in its engine's unit; their properties carry the engine's names
for them (``measured_ms`` and ``reference_ms`` for the wall clock, ``instructions``
and ``reference_instructions`` for instruction counts, ...), so the XML says what
they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_torch.core.properties import decode, encode, number
from pytest_torch.core.tables import format_table

PREFIX = "torch_perf."
#: a record's own fields besides its figures, the figures' unit, and those that are numbers
_TEXTS = ("check", "stat", "verdict")
_NUMBERS = ("change_pct", "spread_pct", "peak_memory_mb")


@dataclass
class PerfRecord:
    """One line of the end-of-run table."""

    label: str
    #: "budget", or the engine's check ("baseline", "instructions", "flops")
    check: str
    stat: str
    measured: float | None  # None when nothing was measured
    verdict: str
    reference: float | None = None  # the budget or the baseline
    change_pct: float | None = None
    spread_pct: float | None = None
    peak_memory_mb: float | None = None
    #: the figures' unit: an engine's (see ``engines``)
    unit: str = "ms"

    def to_properties(self) -> list[tuple[str, object]]:
        measured, reference = _fields(self.unit)
        figures: dict[str, object] = {name: getattr(self, name) for name in _TEXTS}
        figures[measured], figures[reference] = self.measured, self.reference
        figures.update({name: getattr(self, name) for name in _NUMBERS})
        return encode(PREFIX, self.label, figures)

    @classmethod
    def from_properties(cls, properties: Iterable[tuple[str, object]]) -> list[PerfRecord]:
        records = []
        for label, values in decode(properties, PREFIX).items():
            if not set(_TEXTS) <= values.keys():
                continue  # not one of ours
            unit = _unit_of(values.keys())
            if unit is None:
                continue
            measured, reference = _fields(unit)
            data = {measured: values.get(measured), reference: values.get(reference)}
            data.update({name: values.get(name) for name in _NUMBERS})
            figures = {name: number(value) for name, value in data.items() if value is not None}
            if None in figures.values():
                continue  # a figure that is no number: not one of ours
            records.append(
                cls(
                    label=label,
                    check=str(values["check"]),
                    stat=str(values["stat"]),
                    verdict=str(values["verdict"]),
                    measured=figures.get(measured),
                    reference=figures.get(reference),
                    change_pct=figures.get("change_pct"),
                    spread_pct=figures.get("spread_pct"),
                    peak_memory_mb=figures.get("peak_memory_mb"),
                    unit=unit,
                )
            )
        return records


def _fields(unit: str) -> tuple[str, str]:
    from pytest_torch.perf.engines import by_unit  # a cycle: engines build records

    return by_unit(unit).fields


def _unit_of(names: Iterable[str]) -> str | None:
    """The unit whose figures' names are among ``names`` (the wall clock's when none
    is: a record of nothing measured)."""
    from pytest_torch.perf.engines import ENGINES  # a cycle: engines build records

    found = set(names)
    for engine in ENGINES.values():
        if found & set(engine.fields):
            return engine.unit
    return "ms"


def _share(fraction: float) -> str:
    """0.002 -> "0.2 %", 0.46 -> "46 %": small shares keep a significant digit."""
    percent = 100 * fraction
    return f"{percent:.1f} %" if percent < 10 else f"{percent:.0f} %"


def render_table(records: list[PerfRecord]) -> list[str]:
    """An aligned table with units, one row per record."""
    from pytest_torch.perf.engines import by_unit  # a cycle: engines build records

    header = ("test", "check", "statistic", "measured", "reference", "vs reference", "verdict")
    rows = [header]
    for record in records:
        engine = by_unit(record.unit)
        measured = "-" if record.measured is None else engine.fmt(record.measured)
        reference = "-" if record.reference is None else engine.fmt(record.reference)
        digits = engine.change_digits
        change = "-" if record.change_pct is None else f"{record.change_pct:+.{digits}f} %"
        if record.check == "budget" and record.measured is not None and record.reference:
            change = f"{_share(record.measured / record.reference)} of budget"
        rows.append(
            (record.label, record.check, record.stat, measured, reference, change, record.verdict)
        )
    return format_table(rows, left=(0, 1, 2, 6), rule=True)
