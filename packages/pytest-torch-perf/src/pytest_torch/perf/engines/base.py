"""The one seam between perf's checks and what they measure: a measurement engine.

``perf_baseline(...)`` and benchmark cases hand an engine one call to check
(:class:`CallCheck`); the engine measures it, records it (``--torch-update-perf``) or
compares it with its baseline, and returns what it decided (``outcome.Outcome``). An
engine says once what everything around it needs to know: its name (the value of
``--torch-perf-measure``), the baseline file section it reads and writes and the key
an entry is filed under, the unit of its figures and how the table shows them, the
tolerances ``perf_baseline`` accepts for it, and whether latency budgets can be
judged while it runs. The session chooses one engine, once (``state.PerfSession.engine``).

Adding an engine is its own room under ``engines/``, an object that satisfies
:class:`Engine`, and one line in ``engines.ENGINES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_torch.core.ids import plain_nodeid

if TYPE_CHECKING:
    import torch

    from pytest_torch.perf.outcome import Outcome
    from pytest_torch.perf.state import PerfSession
    from pytest_torch.perf.suites.cases import CaseResult


@dataclass
class CallCheck:
    """One call to record or compare: ``target(*inputs, **kwargs)`` on ``device``."""

    item: pytest.Item
    #: the check's name in the baseline file and the table
    label: str
    #: perf_baseline's ``name=`` ("" for none)
    name: str
    target: Any
    inputs: tuple[Any, ...]
    kwargs: dict[str, Any]
    device: torch.device
    #: the engine's tolerances (perf_baseline keyword -> value), defaults filled in
    tolerances: Mapping[str, float]
    #: whether a regression may be measured again in a fresh process (the wall clock's
    #: perf_baseline calls; a benchmark case is not)
    fresh: bool = True
    #: every measurement the engine took, in order (a benchmark case shows them)
    taken: list[Any] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return plain_nodeid(self.item)


class Engine(Protocol):
    """A measurement engine (see the module docstring)."""

    #: the value of --torch-perf-measure, and what it measures (for --help)
    name: str
    summary: str
    #: the baseline file's section for its entries
    section: str
    #: the table's "check" column for a call it checked
    check: str
    #: the unit of its figures; and the names of the measured and reference figures in
    #: a record's properties (the JUnit XML)
    unit: str
    fields: tuple[str, str]
    #: decimals of the table's "vs reference" percentage
    change_digits: int
    #: the perf_baseline keywords it reads -> their defaults (None: the session's option),
    #: and what each means, for the message that rejects a bad one
    tolerances: Mapping[str, float | None]
    hints: Mapping[str, str]
    #: why a latency budget cannot be judged in a session that uses it; None: it can
    latency_budgets: str | None
    #: what ``--torch-update-perf`` needs beside it to record for this engine ("" for
    #: the default engine: ``--torch-perf-measure=instructions``)
    option: str
    #: what a recording run recorded: "{count} perf baseline(s) for this machine"
    #: (``{count}``: how many, ``{keys}``: the keys they were filed under)
    recorded_as: str
    #: what its figures are, for the perf table's title ("" for the wall clock's)
    figures: str
    #: the benchmark table's caption, and what it lacks before anything was recorded
    caption: str
    missing: str

    def launch(self, config: pytest.Config) -> int | None:
        """Run the session some other way (and return its exit status), or None to run
        the tests in this process."""
        ...

    def header(self, session: PerfSession) -> list[str] | None:
        """The run's header lines; None for the default (the thread count)."""
        ...

    def parse_entry(self, data: Mapping[str, Any], where: str) -> Any:
        """A baseline entry from its JSON; ``baselines.BaselineFileError`` naming
        ``where`` for a malformed one."""
        ...

    def check_call(self, call: CallCheck, session: PerfSession) -> Outcome:
        """Record or compare one call; never raises for a regression (the outcome says
        "pass", "fail" or "skip")."""
        ...

    def fill_case(
        self, result: CaseResult, call: CallCheck, outcome: Outcome, session: PerfSession
    ) -> None:
        """A benchmark case's figures from its check."""
        ...

    def fmt(self, value: float) -> str:
        """One figure, with its unit, for the table."""
        ...


def default_tolerances(
    engine: Engine, given: Mapping[str, float | None], options: Mapping[str, float]
) -> dict[str, float]:
    """The engine's tolerances: those given, else its defaults, else the session's
    options (``options``: tolerance keyword -> the option's value)."""
    chosen = {}
    for name, default in engine.tolerances.items():
        value = given.get(name)
        if value is None:
            value = default if default is not None else options[name]
        chosen[name] = float(value)
    return chosen


def fill_count_case(result: CaseResult, call: CallCheck, outcome: Outcome) -> None:
    """A counting engine's benchmark case: the count per call and the baseline's, in the
    engine's unit, and its row in the perf table too."""
    row = outcome.record
    call.item.user_properties.extend(row.to_properties())
    result.unit = row.unit
    result.count = None if row.measured is None else int(row.measured)
    result.baseline_count = None if row.reference is None else int(row.reference)
