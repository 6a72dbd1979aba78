"""What a session records, and where it goes at the end of the run.

Perf records and benchmark results travel in ``report.user_properties`` (so they reach
the controller under pytest-xdist, and the JUnit XML); new baselines recorded by an xdist
worker are handed to the controller in ``workeroutput``, and the controller (or a run
without workers) merges them into the baseline file once.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_torch.perf.settings import PerfSettings

if TYPE_CHECKING:
    from pytest_torch.core.tables import ReportTable

#: compilation.checks.PREFIX, without importing the engine for every report
COMPILE_PREFIX = "torch_compile."
#: where an xdist worker hands its recordings to the controller, which writes them once
WORKER_RECORDINGS = "torch_perf_recordings"
#: the same for instruction counts
WORKER_COUNTS = "torch_perf_instruction_recordings"


def collect(settings: PerfSettings, when: str, skipped: bool, properties: Sequence[Any]) -> None:
    """Keep the perf records and benchmark results of one test report."""
    if not properties:
        return
    if when == "call" or (when == "setup" and skipped):
        from pytest_torch.core.properties import values_of
        from pytest_torch.perf.check_records import PerfRecord
        from pytest_torch.perf.suites.cases import PROPERTY, CaseResult

        settings.records.extend(PerfRecord.from_properties(properties))
        if any(str(name).startswith(COMPILE_PREFIX) for name, _ in properties):
            from pytest_torch.perf.compilation.checks import CompileRecord

            settings.compile_records.extend(CompileRecord.from_properties(properties))
        settings.benchmark_results.extend(
            CaseResult.from_json(str(value)) for value in values_of(properties, PROPERTY)
        )


def hand_to_controller(settings: PerfSettings, workeroutput: MutableMapping[str, Any]) -> None:
    """An xdist worker: its new baselines, as JSON, for the controller to write."""
    if settings.pending:
        workeroutput[WORKER_RECORDINGS] = {
            machine: {label: entry.to_json() for label, entry in tests.items()}
            for machine, tests in settings.pending.items()
        }
    if settings.instruction_pending:
        workeroutput[WORKER_COUNTS] = {
            key: {label: entry.to_json() for label, entry in tests.items()}
            for key, tests in settings.instruction_pending.items()
        }


def take_over(
    settings: PerfSettings,
    recordings: Mapping[str, Mapping[str, Any]],
    counts: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """xdist's controller: take over the baselines a worker recorded (``recordings`` and
    ``counts``: what :func:`hand_to_controller` wrote under :data:`WORKER_RECORDINGS` and
    :data:`WORKER_COUNTS`)."""
    from pytest_torch.perf.baselines import Baseline, InstructionBaseline

    for machine, tests in recordings.items():
        for label, entry in tests.items():
            settings.pending.setdefault(machine, {})[label] = Baseline.from_json(entry, label)
    for key, tests in (counts or {}).items():
        for label, entry in tests.items():
            found = InstructionBaseline.from_json(entry, label)
            settings.instruction_pending.setdefault(key, {})[label] = found


def write_baselines(settings: PerfSettings) -> str | None:
    """Merge the session's new baselines into the file; the error message if it fails
    (then nothing is reported as recorded)."""
    if not settings.pending and not settings.instruction_pending:
        return None
    from pytest_torch.perf.baselines import BaselineFileError

    try:
        settings.file().merge(settings.pending, settings.instruction_pending)
    except BaselineFileError as exc:
        settings.pending.clear()
        settings.instruction_pending.clear()
        return str(exc)
    return None


def write_benchmark_outputs(settings: PerfSettings) -> None:
    """The benchmark JSON and plots asked for, their paths kept for the summary."""
    from pytest_torch.core.fingerprint import hardware_fingerprint
    from pytest_torch.perf.suites.report import write_json, write_plots

    if settings.benchmark_json is not None:
        write_json(
            settings.benchmark_json, settings.benchmark_results, hardware_fingerprint().to_dict()
        )
        settings.benchmark_outputs.append(settings.benchmark_json)
    if settings.benchmark_plot is not None:
        settings.benchmark_outputs += write_plots(
            settings.benchmark_plot, settings.benchmark_results, settings.machine()
        )


def summary(settings: PerfSettings) -> list[tuple[str | None, list[str]]]:
    """The end-of-run summary: (title of its section or None, lines) in order."""
    sections: list[tuple[str | None, list[str]]] = []
    if settings.records:
        from pytest_torch.perf.check_records import render_table

        title = f"torch perf: measured on {settings.threads_text()}"
        sections.append((title, list(render_table(settings.records))))
    if settings.compile_records:
        from pytest_torch.perf.compilation.checks import render_table as compile_table

        sections.append(("torch compile", compile_table(settings.compile_records)))
    if settings.benchmark_results:
        from pytest_torch.perf.suites.report import render

        lines = list(render(settings.benchmark_results, settings.machine()))
        lines += [f"benchmark output: {path}" for path in settings.benchmark_outputs]
        sections.append(("torch benchmark", lines))
    written = sum(len(tests) for tests in settings.pending.values())
    if written:
        where = settings.baseline_path
        line = f"recorded {written} perf baseline(s) for this machine in {where}"
        sections.append((None, [line]))
    counted = sum(len(tests) for tests in settings.instruction_pending.values())
    if counted:
        keys = ", ".join(sorted(settings.instruction_pending))
        line = f"recorded {counted} instruction count(s) for {keys} in {settings.baseline_path}"
        sections.append((None, [line]))
    return sections


def reach_lines(settings: PerfSettings) -> list[str]:
    """The end-of-run line of a recording run that recorded nothing."""
    recorded = settings.pending or settings.instruction_pending or settings.benchmark_results
    if not settings.update or recorded:
        return []
    return [
        "torch: --torch-update-perf recorded no baseline: no test that ran called"
        " perf_baseline(...) (a fixture: a unittest.TestCase method cannot request it) or"
        " ran a benchmark case (with --torch-benchmark)"
    ]


def report_tables(settings: PerfSettings) -> list[ReportTable]:
    """The perf and benchmark tables, for the reports other plugins write."""
    from pytest_torch.core.tables import ReportTable

    tables = []
    if settings.records:
        from pytest_torch.perf.check_records import render_table

        tables.append(ReportTable("Performance", lambda: render_table(settings.records)))
    if settings.compile_records:
        from pytest_torch.perf.compilation.checks import render_table as compile_table

        records = settings.compile_records
        tables.append(ReportTable("torch compile", lambda: compile_table(records)))
    if settings.benchmark_results:
        from pytest_torch.perf.suites.report import render

        results = settings.benchmark_results
        tables.append(ReportTable("Benchmarks", lambda: render(results, settings.machine())))
    return tables
