"""What a session records, and where it goes at the end of the run.

Perf records and benchmark results travel in ``report.user_properties`` (so they reach
the controller under pytest-xdist, and the JUnit XML); new baselines recorded by an xdist
worker are handed to the controller in ``workeroutput``, and the controller (or a run
without workers) merges them into the baseline file once.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from pytest_torch.core.fingerprint import hardware_fingerprint
from pytest_torch.core.properties import values_of
from pytest_torch.core.tables import ReportTable
from pytest_torch.perf.baselines import BaselineFileError
from pytest_torch.perf.compilation.checks import PREFIX as COMPILE_PREFIX
from pytest_torch.perf.compilation.checks import CompileRecord
from pytest_torch.perf.compilation.checks import render_table as compile_table
from pytest_torch.perf.engines import ENGINES
from pytest_torch.perf.options import BENCHMARK, UPDATE
from pytest_torch.perf.records import PerfRecord, render_table
from pytest_torch.perf.state import PerfSession
from pytest_torch.perf.suites.cases import PROPERTY, CaseResult
from pytest_torch.perf.suites.report import render, write_json, write_plots

#: where an xdist worker hands its recordings to the controller, which writes them once
WORKER_RECORDINGS = "torch_perf_recordings"


def collect(session: PerfSession, when: str, skipped: bool, properties: Sequence[Any]) -> None:
    """Keep the perf records and benchmark results of one test report."""
    if not properties:
        return
    if when == "call" or (when == "setup" and skipped):
        session.records.extend(PerfRecord.from_properties(properties))
        if any(str(name).startswith(COMPILE_PREFIX) for name, _ in properties):
            session.compile_records.extend(CompileRecord.from_properties(properties))
        session.benchmark_results.extend(
            CaseResult.from_json(str(value)) for value in values_of(properties, PROPERTY)
        )


def hand_to_controller(session: PerfSession, workeroutput: MutableMapping[str, Any]) -> None:
    """An xdist worker: its new baselines, as JSON, for the controller to write."""
    if session.pending:
        workeroutput[WORKER_RECORDINGS] = {
            section: {
                key: {label: entry.to_json() for label, entry in tests.items()}
                for key, tests in keys.items()
            }
            for section, keys in session.pending.items()
        }


def take_over(
    session: PerfSession, recordings: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> None:
    """xdist's controller: take over the baselines a worker recorded (``recordings``:
    what :func:`hand_to_controller` wrote under :data:`WORKER_RECORDINGS`), each
    section's entries read by its engine."""
    engines = {engine.section: engine for engine in ENGINES.values()}
    for section, keys in recordings.items():
        for key, tests in keys.items():
            for label, entry in tests.items():
                session.keep(section, key, label, engines[section].parse_entry(entry, label))


def write_baselines(session: PerfSession) -> str | None:
    """Merge the session's new baselines into the file; the error message if it fails
    (then nothing is reported as recorded)."""
    if not session.pending:
        return None
    try:
        session.file().merge(session.pending)
    except BaselineFileError as exc:
        session.pending.clear()
        return str(exc)
    return None


def write_benchmark_outputs(session: PerfSession) -> None:
    """The benchmark JSON and plots asked for, their paths kept for the summary."""
    settings = session.settings
    if settings.benchmark_json is not None:
        fingerprint = hardware_fingerprint().to_dict()
        write_json(settings.benchmark_json, session.benchmark_results, fingerprint)
        session.benchmark_outputs.append(settings.benchmark_json)
    if settings.benchmark_plot is not None:
        session.benchmark_outputs += write_plots(
            settings.benchmark_plot, session.benchmark_results, _measured_on(session)
        )


def _measured_on(session: PerfSession) -> str:
    """The machine the benchmark cases were measured on, as their workers said (xdist's
    controller, which ran none, need not import torch to say it)."""
    said = next((r.machine for r in session.benchmark_results if r.machine), "")
    return said or session.machine()


def summary(session: PerfSession) -> list[tuple[str | None, list[str]]]:
    """The end-of-run summary: (title of its section or None, lines) in order."""
    sections: list[tuple[str | None, list[str]]] = []
    if session.records:
        figures = session.engine.figures
        title = f"torch perf: {f'{figures}, ' if figures else ''}measured on"
        title += f" {session.settings.threads_text()}"
        sections.append((title, list(render_table(session.records))))
    if session.compile_records:
        sections.append(("torch compile", compile_table(session.compile_records)))
    if session.benchmark_results:
        lines = list(render(session.benchmark_results, _measured_on(session)))
        lines += [f"benchmark output: {path}" for path in session.benchmark_outputs]
        sections.append(("torch benchmark", lines))
    for engine in ENGINES.values():
        keys = session.pending.get(engine.section, {})
        count = sum(len(tests) for tests in keys.values())
        if count:
            what = engine.recorded_as.format(count=count, keys=", ".join(sorted(keys)))
            sections.append((None, [f"recorded {what} in {session.settings.baseline_path}"]))
    return sections


def reach_lines(session: PerfSession) -> list[str]:
    """The end-of-run line of a recording run that recorded nothing."""
    if not session.settings.update or session.pending or session.benchmark_results:
        return []
    refused = [
        r for r in session.records if r.check != "budget" and r.verdict.startswith("not recorded")
    ]
    if refused:
        return [
            f"torch: {UPDATE} recorded no baseline: {len(refused)} measurement(s) ran, and"
            f" none could be recorded ({refused[0].verdict}; the table and the test reports"
            f" say why). Re-run {UPDATE} on a quieter machine"
        ]
    return [
        f"torch: {UPDATE} recorded no baseline: no test that ran called"
        " perf_baseline(...) (a fixture: a unittest.TestCase method cannot request it) or"
        f" ran a benchmark case (with {BENCHMARK})"
    ]


def report_tables(session: PerfSession) -> list[ReportTable]:
    """The perf and benchmark tables, for the reports other plugins write."""
    tables = []
    records, compiled = session.records, session.compile_records
    results = session.benchmark_results
    if records:
        tables.append(ReportTable("Performance", lambda: render_table(records)))
    if compiled:
        tables.append(ReportTable("torch compile", lambda: compile_table(compiled)))
    if results:
        tables.append(ReportTable("Benchmarks", lambda: render(results, _measured_on(session))))
    return tables
