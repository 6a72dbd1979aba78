"""pytest wiring of the memory plugin (entry point ``torch_memory``).

Options, the ``torch_max_memory`` and ``torch_memory_leak`` markers, the per-test
hooks around each test body (registered only once a test or an option needs them)
and the end-of-run sections. What they do lives in plain modules: ``settings`` (the
options), ``markers`` (the markers' declarations), ``asked`` (what a test's markers
ask), ``measured_devices`` (which devices a body is measured on), ``body_measurement``
(a body against its budget), ``leak_runner`` (the repeated runs of the leak check),
``results`` (peaks and known leaks gathered from the reports), and the engines
``budgets``, ``census``, ``leaks``, ``culprits`` and ``report``. Importing this module
never imports torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.ondemand import register_once
from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini
from pytest_torch.memory.markers import BUDGET, LEAK
from pytest_torch.memory.settings import read_settings, settings_key

if TYPE_CHECKING:
    from pytest_torch.core.tables import ReportTable
    from pytest_torch.memory.results import MemoryResults
    from pytest_torch.memory.settings import MemorySettings

pytest_plugins = ["torch_core"]

BUDGET_MARKER = BUDGET.name
LEAK_MARKER = LEAK.name
RUNNER = "torch_memory_runner"
RESULTS = "torch_memory_results"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_memory")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-memory", "torch-memory: peak-memory budgets and leak checks")
    add_flag_with_ini(
        parser,
        group,
        "--torch-leak-check",
        ini="torch_leak_check",
        help="Run the leak check on every test, not only those marked torch_memory_leak.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-leak-iterations",
        ini="torch_leak_iterations",
        default="5",
        metavar="N",
        help="Runs after the warm-up in a leak check, unless the marker says otherwise.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-leak-tolerance-tensors",
        ini="torch_leak_tolerance_tensors",
        default="0",
        metavar="N",
        help="Live tensors a run may add without counting as a leak.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-leak-tolerance-bytes",
        ini="torch_leak_tolerance_bytes",
        default="0",
        metavar="BYTES",
        help="Bytes a run may add on a device without counting as a leak (e.g. 64KiB).",
    )
    add_flag_with_ini(
        parser,
        group,
        "--torch-memory-report",
        ini="torch_memory_report",
        help="Measure the peak memory of every test body, not only budgeted ones.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-memory-top",
        ini="torch_memory_top",
        default="10",
        metavar="N",
        help="Tests per device in the end-of-run peak-memory table (0: no table).",
    )


def pytest_configure(config: pytest.Config) -> None:
    BUDGET.register(config)
    LEAK.register(config)
    settings = read_settings(config)
    config.stash[settings_key] = settings
    config.pluginmanager.register(_PeakCollector(settings.results), RESULTS)
    if settings.report_all or settings.leak_all:
        register_once(config, RUNNER, _Runner)


class _PeakCollector:
    """Gathers the peaks of every report, also those sent by xdist workers."""

    def __init__(self, results: MemoryResults) -> None:
        self.results = results

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.user_properties:
            return
        self.results.add(report.nodeid, report.user_properties, hasattr(report, "wasxfail"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = {marker.name for marker in metafunc.definition.iter_markers()}
    if BUDGET_MARKER not in names and LEAK_MARKER not in names:
        return
    register_once(metafunc.config, RUNNER, _Runner)
    from pytest_torch.memory.asked import check_markers

    try:
        check_markers(metafunc, metafunc.config.stash[settings_key])
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # unittest.TestCase methods never reach pytest_generate_tests: their markers are
    # seen here (and their arguments checked when the test runs)
    if config.pluginmanager.has_plugin(RUNNER):
        return
    from pytest_torch.core.testkinds import is_unittest

    for item in items:
        if is_unittest(item) and (BUDGET.mark_on(item) or LEAK.mark_on(item)):
            register_once(config, RUNNER, _Runner)
            return


class _Runner:
    """The per-test hooks, registered only once a test needs them (a marker, or a
    run-wide switch), so suites that never measure memory pay nothing per test."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        settings = item.config.stash[settings_key]
        original = _repeat_body(item, settings)
        try:
            if not settings.report_all and BUDGET.mark_on(item) is None:
                return (yield)
            return (yield from _measured(item, settings.report_all))
        finally:
            if original is not None:
                assert isinstance(item, pytest.Function)  # only a function's is replaced
                item.obj = original

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when == "call" and report.failed:
            from pytest_torch.memory.leak_runner import raised_in_run

            text = raised_in_run(item)
            if text is not None:
                from pytest_torch.core.reports import add_section

                add_section(report, "torch-leak-check", text)
        return report


def _measured(item: pytest.Item, every_device: bool) -> Generator[None, None, None]:
    """The test's call, its body measured against its budget (every body's peak with
    ``--torch-memory-report``)."""
    from pytest_torch.memory.body_measurement import BodyMeasurement

    try:
        measurement = BodyMeasurement(item, every_device=every_device)
    except ValueError as exc:  # a unittest method's marker, never seen at collection
        raise pytest.fail.Exception(str(exc), pytrace=False) from None
    measurement.start()
    try:
        result = yield
    finally:
        measurement.stop()
    for message in measurement.warnings():
        warnings.warn(pytest.PytestWarning(message), stacklevel=1)
    failure = measurement.failure()
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    return result


def _repeat_body(item: pytest.Item, settings: MemorySettings) -> Any:
    """For the leak check: the test's body (its ``obj``, which pytest calls for a test
    function and hands unittest for a ``unittest.TestCase`` method) replaced by the
    repeating one, returning the original to put back; None where nothing was replaced
    (no check asked, or one that cannot act: noted with why)."""
    if not settings.leak_all and LEAK.mark_on(item) is None:
        return None
    from pytest_torch.memory.leak_runner import check_name, leak_check_to_run, repeating_body

    try:
        check = leak_check_to_run(item, settings)
    except ValueError as exc:  # a unittest method's marker, never seen at collection
        from pytest_torch.core import reach

        reach.not_acted(item, check_name(item), "a malformed marker (the test failed, saying why)")
        raise pytest.fail.Exception(str(exc), pytrace=False) from None
    if check is None:
        return None
    assert isinstance(item, pytest.Function)  # leak_check_to_run says so
    original = item.obj
    item.obj = repeating_body(item, check)
    return original


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    results = settings.results
    if results.known_leaks:
        from pytest_torch.memory.results import KNOWN_LEAKS_TITLE

        terminalreporter.write_sep("-", KNOWN_LEAKS_TITLE)
        for line in results.known_leak_lines():
            terminalreporter.write_line(line)
    if results.records and settings.top:
        from pytest_torch.memory.report import render_table

        terminalreporter.write_sep("-", "torch memory: highest peaks")
        for line in render_table(results.records, settings.top):
            terminalreporter.write_line(line)


def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The peak table, for the reports other plugins write (the ``--torch-memory-top``
    highest per device; ten when the terminal shows none)."""
    from pytest_torch.core.tables import ReportTable

    settings = config.stash.get(settings_key, None)
    if settings is None or not settings.results.records:
        return None
    records, top = settings.results.records, settings.top or 10

    def render() -> list[str]:
        from pytest_torch.memory.report import render_table

        return render_table(records, top)

    return [ReportTable("Peak memory", render)]
