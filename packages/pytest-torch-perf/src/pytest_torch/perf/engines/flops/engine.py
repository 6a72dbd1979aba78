"""The FLOP-count engine: the floating-point operations of a call, counted by torch's
``FlopCounterMode`` (``counting``): exact, free of machine load, on any device and
without Valgrind. Recorded per torch version (``judging.flop_key``: FLOP formulas
change between torch releases) and compared by ``judging``, with a tolerance of 0 by
default: a count does not move unless the work does."""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import reach
from pytest_torch.perf.baselines import BaselineFileError
from pytest_torch.perf.engines.base import CallCheck, fill_count_case
from pytest_torch.perf.engines.flops import judging
from pytest_torch.perf.engines.flops.counting import FlopCount, count_flops, fmt_flops
from pytest_torch.perf.options import MEASURE, UPDATE
from pytest_torch.perf.outcome import Outcome, PerfRegressionError
from pytest_torch.perf.records import PerfRecord

if TYPE_CHECKING:
    from pytest_torch.perf.state import PerfSession
    from pytest_torch.perf.suites.cases import CaseResult

OPTION = f" {MEASURE}=flops"
RERECORD = f"pytest {UPDATE}{OPTION}"


class FlopEngine:
    """See the module docstring; an :class:`engines.base.Engine`."""

    name: str = "flops"
    summary: str = "floating-point operations counted by torch: exact, on any device"
    section: str = "flops"
    check: str = judging.CHECK
    unit: str = judging.UNIT
    fields: tuple[str, str] = ("flops", "reference_flops")
    change_digits: int = 2
    tolerances: Mapping[str, float | None] = {"flop_tolerance": judging.DEFAULT_FLOP_TOLERANCE}
    hints: Mapping[str, str] = {"flop_tolerance": "(0.01 allows 1 % more FLOPs than the baseline)"}
    latency_budgets: str | None = None
    option: str = OPTION
    recorded_as: str = "{count} FLOP count(s) for {keys}"
    figures: str = "FLOPs counted by torch"
    caption: str = "FLOPs per call (counted by torch's FlopCounterMode, exact)"
    missing: str = "FLOP counts for this torch version"

    def launch(self, config: pytest.Config) -> int | None:
        return None

    def header(self, session: PerfSession) -> list[str] | None:
        return [
            f"torch perf: counting FLOPs with torch's FlopCounterMode (torch"
            f" {judging.flop_key().partition('=')[2]},{OPTION}); latency budgets are judged"
            f" on the wall clock"
        ]

    def parse_entry(self, data: Mapping[str, Any], where: str) -> judging.FlopBaseline:
        try:
            return judging.FlopBaseline.from_json(data)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc!r})") from None

    def fmt(self, value: float) -> str:
        return fmt_flops(value)

    def check_call(self, call: CallCheck, session: PerfSession) -> Outcome:
        """Record (``--torch-update-perf``) or compare the FLOPs of one call."""
        __tracebackhide__ = True
        label, key = call.label, judging.flop_key(call.device.type)
        counted = count_flops(call.target, *call.inputs, **call.kwargs)
        call.taken.append(counted)
        note_reach(call.item, counted)
        if session.settings.update:
            recorded = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
            entry = judging.FlopBaseline(counted, recorded.isoformat())
            session.keep(self.section, key, label, entry)
            outcome = judging.recorded(label, counted, key)
        else:
            outcome = self._compare(call, session, counted, key)
        if counted.uncounted:  # the table says the figure is short too
            outcome.record.verdict += f" ({len(counted.uncounted)} op(s) not counted)"
        return outcome

    def _compare(
        self, call: CallCheck, session: PerfSession, counted: FlopCount, key: str
    ) -> Outcome:
        label, rerecord = call.label, f"{RERECORD} {shlex.quote(call.node_id)}"
        try:
            found = session.file().entries(self.section, label)
        except BaselineFileError as exc:
            raise PerfRegressionError(str(exc)) from None
        recorded_under = key if key in found else judging.other_release(key, found)
        if recorded_under is None:
            return judging.missing(label, key, found, counted, session.settings.strict, rerecord)
        baseline = found[recorded_under]
        outcome = judging.compare(
            label, baseline, counted, call.tolerances["flop_tolerance"], rerecord
        )
        if outcome.status == "pass" and baseline.counted.uncounted != counted.uncounted:
            outcome = judging.coverage_changed(
                label, baseline, counted, session.settings.strict, rerecord
            )
        if recorded_under != key:  # after a torch upgrade: compared, saying so
            outcome = judging.across_releases(outcome, recorded_under, key, rerecord)
        return outcome

    def fill_case(
        self, result: CaseResult, call: CallCheck, outcome: Outcome, session: PerfSession
    ) -> None:
        fill_count_case(result, call, outcome)


FLOPS = FlopEngine()
#: a test one of whose calls counted short (a later full count does not clear it)
_short_key = pytest.StashKey[bool]()


def note_reach(item: pytest.Item, counted: FlopCount) -> None:
    """For the end of the run: whether the test's counts held all of its work."""
    check = OPTION.strip()
    if counted.uncounted:
        item.stash[_short_key] = True
        reach.not_acted(item, check, judging.short_count(counted.uncounted))
    elif not item.stash.get(_short_key, False):
        reach.acted(item, check)


def budget_record(label: str, counted: FlopCount, gflops: float, verdict: str) -> PerfRecord:
    """The table's row of a FLOP budget."""
    limit = judging.budget_flops(gflops)
    return PerfRecord(label, "budget", "total", counted.total, verdict, limit, unit=judging.UNIT)
