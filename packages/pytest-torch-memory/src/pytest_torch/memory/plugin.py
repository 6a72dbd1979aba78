"""pytest wiring of the memory plugin (entry point ``torch_memory``).

Options, the ``torch_max_memory`` and ``torch_memory_leak`` markers, the per-test
hooks around each test body (registered only once a test or an option needs them)
and the end-of-run sections. What they do lives in plain modules: ``options`` (the
options, declared and read), ``settings`` (their values), ``markers`` (the markers'
declarations), ``checks`` (the budget, a check of core's registry), ``asked`` (what a
test's markers ask), ``measured_devices`` (which devices a body is measured on),
``body_measurement`` (a body against its budget), ``leak_runner`` (the repeated runs of
the leak check), ``results`` (peaks and known leaks gathered from the reports), and the
engines ``budgets``, ``census``, ``leaks``, ``culprits`` and ``report``. Importing this
module never imports torch.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.loading import require_core
from pytest_torch.core.ondemand import register_once
from pytest_torch.core.reports import add_section
from pytest_torch.core.tables import ReportTable
from pytest_torch.core.testkinds import is_unittest
from pytest_torch.memory.asked import check_leak_marker
from pytest_torch.memory.checks import CHECKS
from pytest_torch.memory.markers import LEAK
from pytest_torch.memory.options import add_options, read_settings
from pytest_torch.memory.report import render_table
from pytest_torch.memory.results import KNOWN_LEAKS_TITLE, MemoryResults, results_key
from pytest_torch.memory.settings import settings_key

if TYPE_CHECKING:
    from pytest_torch.memory.settings import MemorySettings

pytest_plugins = ["torch_core"]

#: the per-test hooks of the leak check and --torch-memory-report, registered on demand
RUNNER = "torch_memory_runner"
RESULTS = "torch_memory_results"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_memory")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    CHECKS.configure(config)
    LEAK.register(config)
    settings = config.stash[settings_key] = read_settings(config)
    results = config.stash[results_key] = MemoryResults()
    config.pluginmanager.register(_PeakCollector(results), RESULTS)
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
    CHECKS.collect(metafunc)
    if LEAK.mark_on(metafunc) is None:
        return
    register_once(metafunc.config, RUNNER, _Runner)
    try:
        check_leak_marker(metafunc, metafunc.config.stash[settings_key])
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    CHECKS.collected(config, items)
    # unittest.TestCase methods never reach pytest_generate_tests: their leak markers
    # are seen here (and their arguments checked when the test runs)
    if not config.pluginmanager.has_plugin(RUNNER) and any(
        is_unittest(item) and LEAK.mark_on(item) for item in items
    ):
        register_once(config, RUNNER, _Runner)


class _Runner:
    """The per-test hooks of the leak check and ``--torch-memory-report``, registered
    only once a test needs them (a marker, or a run-wide switch), so suites that never
    measure memory pay nothing per test."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        # start-up: the leak engine (census, culprits: ~15 ms) and the measuring modules
        # (~5 ms) load only in runs that check for leaks or measure
        from pytest_torch.memory.body_measurement import peaks_recorded
        from pytest_torch.memory.leak_runner import repeated

        settings: MemorySettings = item.config.stash[settings_key]
        with repeated(item, settings):
            if settings.report_all and not CHECKS.asked(item):  # else a check measures it
                with peaks_recorded(item):
                    return (yield)
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.when == "call" and report.failed:
            from pytest_torch.memory.leak_runner import raised_in_run  # start-up: see above

            text = raised_in_run(item)
            if text is not None:
                add_section(report, "torch-leak-check", text)
        return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    results = config.stash[results_key]
    if results.known_leaks:
        terminalreporter.write_sep("-", KNOWN_LEAKS_TITLE)
        for line in results.known_leak_lines():
            terminalreporter.write_line(line)
    if results.records and settings.top:
        terminalreporter.write_sep("-", "torch memory: highest peaks")
        for line in render_table(results.records, settings.top):
            terminalreporter.write_line(line)


def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The peak table, for the reports other plugins write (the ``--torch-memory-top``
    highest per device; ten when the terminal shows none)."""
    settings = config.stash.get(settings_key, None)
    results = config.stash.get(results_key, None)
    if settings is None or results is None or not results.records:
        return None
    records, top = results.records, settings.top or 10
    return [ReportTable("Peak memory", lambda: render_table(records, top))]
