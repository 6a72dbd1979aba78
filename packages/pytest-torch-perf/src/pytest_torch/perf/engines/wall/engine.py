"""The wall-clock engine: a call's latency and peak memory on this machine, recorded per
machine (the hardware fingerprint) and compared in proportion to the interference
measured around it (``comparison``); a short call's modest regression is measured again
in a fresh process (``fresh_process``) before it fails."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.perf.baselines import BaselineFileError
from pytest_torch.perf.engines.base import CallCheck
from pytest_torch.perf.engines.wall import comparison, fresh_process, recording
from pytest_torch.perf.engines.wall.entry import Baseline
from pytest_torch.perf.engines.wall.latency import measure_latency, peak_memory, sampling
from pytest_torch.perf.engines.wall.settling import MAX_MEASUREMENTS, Measured
from pytest_torch.perf.engines.wall.timing import LatencyResult, fmt_ms
from pytest_torch.perf.options import UPDATE
from pytest_torch.perf.outcome import Outcome, PerfRegressionError
from pytest_torch.perf.records import PerfRecord
from pytest_torch.perf.rule import DEFAULT_LATENCY_TOLERANCE, DEFAULT_MEMORY_TOLERANCE

if TYPE_CHECKING:
    from pytest_torch.perf.state import PerfSession
    from pytest_torch.perf.suites.cases import CaseResult

RERECORD = f"pytest {UPDATE}"
#: the session's fresh processes (see ``fresh_process``)
fresh_key = pytest.StashKey["fresh_process.FreshProcesses"]()


class WallEngine:
    """See the module docstring; an :class:`engines.base.Engine`."""

    name: str = "wall"
    summary: str = "latency on this machine's clock"
    section: str = "machines"
    check: str = "baseline"
    unit: str = "ms"
    fields: tuple[str, str] = ("measured_ms", "reference_ms")
    change_digits: int = 1
    tolerances: Mapping[str, float | None] = {
        "latency_tolerance": DEFAULT_LATENCY_TOLERANCE,
        "memory_tolerance": DEFAULT_MEMORY_TOLERANCE,
    }
    hints: Mapping[str, str] = {
        "latency_tolerance": "(0.3 allows 30 % more than the baseline)",
        "memory_tolerance": "(0.1 allows 10 % more than the baseline)",
    }
    latency_budgets: str | None = None
    option: str = ""
    recorded_as: str = "{count} perf baseline(s) for this machine"
    figures: str = ""
    caption: str = "median latency per call and throughput (samples/s = batch / median)"
    missing: str = "baselines for this machine"

    def launch(self, config: pytest.Config) -> int | None:
        return None

    def header(self, session: PerfSession) -> list[str] | None:
        return None

    def parse_entry(self, data: Mapping[str, Any], where: str) -> Baseline:
        return Baseline.from_json(data, where)

    def fmt(self, value: float) -> str:
        return fmt_ms(value)

    def check_call(self, call: CallCheck, session: PerfSession) -> Outcome:
        __tracebackhide__ = True

        def measure() -> Measured:
            measured = measure_call(session, call)
            call.taken.append(measured)
            return measured

        into = fresh_process.measuring_into()
        if into is not None:  # a fresh process started by a run: measure, judge nothing
            return fresh_process_outcome(into, call.label, call.name, measure)
        return baseline_check(
            session,
            call.node_id,
            call.label,
            measure,
            call.tolerances["latency_tolerance"],
            call.tolerances["memory_tolerance"],
            elsewhere=(
                (lambda: fresh_processes(call.item, session).measure(call.item, call.name))
                if call.fresh
                else None
            ),
        )

    def fill_case(
        self, result: CaseResult, call: CallCheck, outcome: Outcome, session: PerfSession
    ) -> None:
        if not call.taken:  # no comparable baseline: the figures are still the point
            call.taken.append(measure_call(session, call))
        # the figures of the measurement that decided (the one recorded, or the last judged)
        taken: list[Measured] = call.taken
        latency, memory = next(((r, m) for r, m in taken if r is outcome.measured), taken[-1])
        result.add_measurement(latency)
        result.peak_memory = dict(memory)
        result.baseline_ms = outcome.record.reference


WALL = WallEngine()


def measure_call(session: PerfSession, call: CallCheck) -> tuple[LatencyResult, dict[str, int]]:
    """One measurement of the call with the session's settings: its latency, and what
    one call adds to memory at its peak."""
    settings = session.settings
    result = measure_latency(
        call.target,
        *call.inputs,
        settings=sampling(settings),
        device=call.device,
        threads=settings.threads,
        **call.kwargs,
    )
    memory = peak_memory(call.target, call.inputs, call.kwargs, settings.threads, call.device)
    return result, memory


def fresh_processes(item: pytest.Item, session: PerfSession) -> fresh_process.FreshProcesses:
    """The session's fresh processes, started on first use."""
    if fresh_key not in item.config.stash:
        limit = session.settings.fresh_processes
        item.config.stash[fresh_key] = fresh_process.FreshProcesses(item.config, limit)
    return item.config.stash[fresh_key]


def fresh_process_outcome(
    into: Path, label: str, name: str, measure: Callable[[], Measured]
) -> Outcome:
    """In a fresh process: measure (again while other processes disturb it, at most
    ``settling.MAX_MEASUREMENTS`` times) and keep the measurement for the run that asked
    for it; judge nothing."""
    taken = [measure()]
    while taken[-1][0].busy and len(taken) < MAX_MEASUREMENTS:
        taken.append(measure())
    measured = min(taken, key=lambda m: (m[0].busy, m[0].stat(recording.REGRESSION_STAT)))
    fresh_process.write_measured(into, name, measured)
    figure = measured[0].stat(recording.REGRESSION_STAT)
    row = PerfRecord(
        label, "baseline", recording.REGRESSION_STAT, figure, "measured for another run"
    )
    return Outcome("pass", f"{label}: measured for the run that started this one", row)


def baseline_check(
    session: PerfSession,
    node_id: str,
    label: str,
    measure: Callable[[], Measured],
    latency_tolerance: float,
    memory_tolerance: float,
    elsewhere: Callable[[], Measured | str] | None = None,
) -> Outcome:
    """Record (``--torch-update-perf``) or compare one measured thing; never raises for
    a regression: the outcome says "pass", "fail" or "skip" (``elsewhere``: measures it
    in a fresh process, or says why not; see ``comparison.compare``)."""
    __tracebackhide__ = True
    import torch

    settings = session.settings
    torch_version = str(torch.__version__).split("+")[0]
    if settings.update:
        outcome = recording.record(label, measure, torch_version, settings.strict)
        if outcome.baseline is not None:
            session.keep(WALL.section, session.machine(), label, outcome.baseline)
        return outcome
    try:
        baseline = session.file().lookup(WALL.section, session.machine(), label)
    except BaselineFileError as exc:
        raise PerfRegressionError(str(exc)) from None
    if baseline is None:
        return recording.missing_outcome(label, session.machine(), settings.strict)
    return comparison.compare(
        label,
        baseline,
        measure,
        threads=settings.threads,
        torch_version=torch_version,
        tolerance=latency_tolerance,
        memory_tolerance=memory_tolerance,
        slack_ms=settings.slack_ms,
        strict=settings.strict,
        machine=session.machine(),
        rerecord=f"{RERECORD} {shlex.quote(node_id)}",
        elsewhere=elsewhere,
    )
