"""pytest wiring of the memory plugin (entry point ``torch_memory``).

Options, the ``torch_max_memory`` and ``torch_memory_leak`` markers, the peak
measurement around each test body, the repeated runs of the leak check and the
end-of-run table. The measuring and judging live in ``core.memory``, ``budgets``,
``census``, ``leaks`` and ``culprits``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini, option_or_ini

if TYPE_CHECKING:
    import torch

    from pytest_torch.core.tables import ReportTable
    from pytest_torch.memory.budgets import MemoryBudget
    from pytest_torch.memory.leak_settings import LeakCheck
    from pytest_torch.memory.report import PeakRecord

pytest_plugins = ["torch_core"]

BUDGET_MARKER = "torch_max_memory"  # budgets.MARKER, without importing the engine
LEAK_MARKER = "torch_memory_leak"  # leaks.MARKER
LEAK_PROPERTY = "torch_memory_leak_report"


class MemorySettings:
    """The memory options of a session, and the peaks it measured."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(
        self, leak_all: bool, leak_defaults: LeakCheck, report_all: bool, top: int
    ) -> None:
        self.leak_all = leak_all
        self.leak_defaults = leak_defaults
        self.report_all = report_all
        self.top = top
        self.records: list[PeakRecord] = []
        #: (test id, leak report) of tests expected to fail (xfail) that leaked
        self.known_leaks: list[tuple[str, str]] = []


settings_key = pytest.StashKey[MemorySettings]()


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


def _int_option(
    config: pytest.Config, ini: str, flag: str, minimum: int, maximum: int | None = None
) -> int:
    value = option_or_ini(config, ini)
    try:
        number = int(str(value).strip())
    except ValueError:
        number = minimum - 1
    if number < minimum or (maximum is not None and number > maximum):
        expected = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise pytest.UsageError(
            f"{flag} (ini {ini}): expected a whole number {expected}, got {value!r}."
            f" Example: {flag}={max(minimum, 5)}"
        )
    return number


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{BUDGET_MARKER}(mb, device=None): fail the test if the peak memory allocated by"
        " torch during its body exceeds mb MiB on any measured device (cpu included), or"
        " only on the device types given.",
    )
    config.addinivalue_line(
        "markers",
        f"{LEAK_MARKER}(iterations=5, tolerance_tensors=0, tolerance_bytes=0): run the test"
        " body once to warm up and then iterations more times; fail if every run leaves"
        " more live tensors or bytes behind.",
    )
    from pytest_torch.memory.leak_settings import MAX_ITERATIONS, LeakCheck, parse_bytes

    iterations = _int_option(
        config, "torch_leak_iterations", "--torch-leak-iterations", 2, MAX_ITERATIONS
    )
    tensors = _int_option(
        config, "torch_leak_tolerance_tensors", "--torch-leak-tolerance-tensors", 0
    )
    try:
        tolerance_bytes = parse_bytes(
            option_or_ini(config, "torch_leak_tolerance_bytes"),
            "--torch-leak-tolerance-bytes (ini torch_leak_tolerance_bytes)",
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    settings = MemorySettings(
        leak_all=bool(option_or_ini(config, "torch_leak_check")),
        leak_defaults=LeakCheck(iterations, tensors, tolerance_bytes),
        report_all=bool(option_or_ini(config, "torch_memory_report")),
        top=_int_option(config, "torch_memory_top", "--torch-memory-top", 0),
    )
    config.stash[settings_key] = settings
    config.pluginmanager.register(_PeakCollector(settings), "torch_memory_results")
    if settings.report_all or settings.leak_all:
        _need_runner(config)


class _PeakCollector:
    """Gathers the peaks of every report, also those sent by xdist workers."""

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.user_properties:
            return
        from pytest_torch.memory.report import PeakRecord

        self.settings.records += PeakRecord.from_properties(report.nodeid, report.user_properties)
        if hasattr(report, "wasxfail"):  # a failure's report is shown by pytest already
            self.settings.known_leaks += [
                (report.nodeid, str(value))
                for name, value in report.user_properties
                if name == LEAK_PROPERTY
            ]


def _budget(node: pytest.Item | pytest.Metafunc) -> MemoryBudget | None:
    from pytest_torch.memory.budgets import parse_budget

    definition = node.definition if isinstance(node, pytest.Metafunc) else node
    marker = definition.get_closest_marker(BUDGET_MARKER)
    if marker is None:
        return None
    return parse_budget(marker.args, marker.kwargs, definition.nodeid)


def _leak_check(node: pytest.Item | pytest.Metafunc, settings: MemorySettings) -> LeakCheck | None:
    from pytest_torch.memory.leak_settings import parse_leak_check

    definition = node.definition if isinstance(node, pytest.Metafunc) else node
    marker = definition.get_closest_marker(LEAK_MARKER)
    if marker is None:
        return settings.leak_defaults if settings.leak_all else None
    return parse_leak_check(marker.args, marker.kwargs, definition.nodeid, settings.leak_defaults)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = {marker.name for marker in metafunc.definition.iter_markers()}
    if BUDGET_MARKER not in names and LEAK_MARKER not in names:
        return
    _need_runner(metafunc.config)
    try:
        _budget(metafunc)
        _leak_check(metafunc, metafunc.config.stash[settings_key])
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    if LEAK_MARKER in names:
        why = _runs_once(metafunc.config, metafunc.definition.nodeid, metafunc.fixturenames)
        if why is not None:
            raise pytest.Collector.CollectError(
                f"{metafunc.definition.nodeid}: @pytest.mark.{LEAK_MARKER} repeats the test"
                f" body, but this test must run once: {why}. Check the model's step for"
                f" leaks in a test of its own."
            )


def _runs_once(config: pytest.Config, nodeid: str, fixturenames: Sequence[str]) -> str | None:
    """Why a sibling plugin needs this test's body to run once (e.g. perf timing it)."""
    answer: str | None = config.hook.pytest_torch_runs_once(
        config=config, nodeid=nodeid, fixturenames=tuple(fixturenames)
    )
    return answer


def _devices(item: pytest.Item, budget: MemoryBudget | None) -> list[torch.device]:
    from pytest_torch.core import devices
    from pytest_torch.core.selection import get_settings

    chosen = []
    for device_type in get_settings(item.config).available():
        if budget is not None and not budget.applies_to(device_type):
            continue
        resolved = item.config.hook.pytest_torch_resolve_device(
            config=item.config, device_type=device_type
        )
        chosen.append(devices.as_device(resolved))
    return chosen


@pytest.hookimpl(wrapper=True)
def _runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    settings = item.config.stash[settings_key]
    if not settings.report_all and item.get_closest_marker(BUDGET_MARKER) is None:
        return (yield)
    from pytest_torch.core.memory import PeakTracker
    from pytest_torch.memory.budgets import budget_failure, over_budget
    from pytest_torch.memory.report import PeakRecord

    budget = _budget(item)
    tracker = PeakTracker(_devices(item, None if settings.report_all else budget))
    tracker.start()
    try:
        result = yield
    finally:
        results = tracker.stop()
        item.user_properties += PeakRecord.to_properties(results, budget)
    if budget is not None:
        for device, reason in sorted(tracker.unmeasured.items()):
            if not budget.applies_to(device):
                continue
            warnings.warn(
                pytest.PytestWarning(
                    f"{item.nodeid}: @pytest.mark.{BUDGET_MARKER} could not measure {device}:"
                    f" {reason}; the budget was not checked there."
                ),
                stacklevel=1,
            )
        unmeasured = {d: r for d, r in tracker.unmeasured.items() if budget.applies_to(d)}
        if any(over_budget(peak, budget) for peak in results.values()):
            tracker.name_blocks()
        failure = budget_failure(tracker.results, budget, unmeasured)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def _pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    settings = pyfuncitem.config.stash[settings_key]
    if not settings.leak_all and pyfuncitem.get_closest_marker(LEAK_MARKER) is None:
        return (yield)
    original = pyfuncitem.obj
    if _runs_once(pyfuncitem.config, pyfuncitem.nodeid, pyfuncitem.fixturenames) is not None:
        return (yield)  # e.g. perf tests time themselves once (only reached by --torch-leak-check)
    if inspect.iscoroutinefunction(original):
        return (yield)  # async bodies are run by their own plugin
    check = _leak_check(pyfuncitem, settings)
    assert check is not None
    accelerators = [d for d in _devices(pyfuncitem, None) if d.type != "cpu"]
    root = str(pyfuncitem.config.rootpath)

    def run_repeatedly(**kwargs: Any) -> None:
        __tracebackhide__ = True
        from pytest_torch.memory.leaks import check_for_leaks

        message = check_for_leaks(lambda: original(**kwargs), check, accelerators, root)
        if message is not None:
            pyfuncitem.user_properties.append((LEAK_PROPERTY, message))
            pytest.fail(message, pytrace=False)

    pyfuncitem.obj = run_repeatedly
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original


RUNNER = "torch_memory_runner"


class _Runner:
    """The per-test hooks, registered only once a test needs them (a marker, or a
    run-wide switch), so suites that never measure memory pay nothing per test."""

    pytest_runtest_call = staticmethod(_runtest_call)
    pytest_pyfunc_call = staticmethod(_pyfunc_call)


def _need_runner(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(RUNNER):
        config.pluginmanager.register(_Runner(), RUNNER)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    if settings.known_leaks:
        terminalreporter.write_sep("-", "torch memory: known leaks (tests marked xfail)")
        for test, message in settings.known_leaks:
            terminalreporter.write_line(f"{test}:")
            for line in message.splitlines():
                terminalreporter.write_line(f"  {line}")
    if settings.records and settings.top:
        from pytest_torch.memory.report import render_table

        terminalreporter.write_sep("-", "torch memory: highest peaks")
        for line in render_table(settings.records, settings.top):
            terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The peak table, for the reports other plugins write (the ``--torch-memory-top``
    highest per device; ten when the terminal shows none)."""
    from pytest_torch.core.tables import ReportTable

    settings = config.stash.get(settings_key, None)
    if settings is None or not settings.records:
        return None

    def render() -> list[str]:
        from pytest_torch.memory.report import render_table

        return render_table(settings.records, settings.top or 10)

    return [ReportTable("Peak memory", render)]
