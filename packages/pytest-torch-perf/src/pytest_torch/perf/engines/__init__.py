"""Measurement engines, one room each, behind one protocol (``base.Engine``):

- ``wall``: how long a call takes on this machine's clock, on a machine that other
  processes share, judged in proportion to the interference measured around it;
- ``instructions``: how many instructions a call executes, counted under Valgrind,
  which no other process changes;
- ``flops``: how many floating-point operations a call performs, counted by torch's
  ``FlopCounterMode``: exact, on any device.

A session uses one, chosen once from ``--torch-perf-measure`` (``plugin`` reads the
option once and keeps ``PerfSession.engine``). Adding an engine is its room and one
line in :data:`ENGINES`.
"""

from __future__ import annotations

from pytest_torch.perf.baselines import Parser
from pytest_torch.perf.engines.base import Engine
from pytest_torch.perf.engines.flops.engine import FLOPS
from pytest_torch.perf.engines.instructions.engine import INSTRUCTIONS
from pytest_torch.perf.engines.wall.engine import WALL

#: every engine by its --torch-perf-measure name; the first is the default
ENGINES: dict[str, Engine] = {engine.name: engine for engine in (WALL, INSTRUCTIONS, FLOPS)}


def entry_parsers() -> dict[str, Parser]:
    """Each engine's baseline file section and the parser of its entries."""
    return {engine.section: engine.parse_entry for engine in ENGINES.values()}


def by_unit(unit: str) -> Engine:
    """The engine whose figures are in ``unit`` (a record's)."""
    return next(engine for engine in ENGINES.values() if engine.unit == unit)
