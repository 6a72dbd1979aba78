"""pytest wiring of the perf plugin (entry point ``torch_perf``): options (``options``),
per-test checks (``checks``, listed in :data:`CHECKS`), fixtures and hooks. The work
lives in plain modules: ``engines`` (what a check measures: the wall clock, instruction
counts, FLOP counts), ``fixtures`` (what ``latency`` and ``perf_baseline`` do),
``state`` (what the session gathers), ``results`` (records from the reports, xdist
hand-over, files written at the end).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.checks import Checks
from pytest_torch.core.loading import require_core
from pytest_torch.perf import fixtures, options, results
from pytest_torch.perf.checks.benchmark import BenchmarkSuite
from pytest_torch.perf.checks.compile_budget import CompileBudget
from pytest_torch.perf.checks.flop_budget import FlopBudget
from pytest_torch.perf.checks.latency_budget import LATENCY_BUDGET
from pytest_torch.perf.engines import ENGINES
from pytest_torch.perf.engines.wall.fresh_process import WORKER_ARGS, invocation_of
from pytest_torch.perf.settings import PerfSettings, settings_key
from pytest_torch.perf.state import PerfSession, session_key
from pytest_torch.perf.suites.cases import CASE_FIXTURE

if TYPE_CHECKING:
    from pytest_torch.core.tables import ReportTable
    from pytest_torch.perf.engines.wall.timing import LatencyResult
    from pytest_torch.perf.outcome import Outcome
    from pytest_torch.perf.suites.cases import Case

pytest_plugins = ["torch_core"]

#: perf's per-test checks; a failure of an earlier one is reported first
CHECKS = Checks(
    "torch_perf_runner", (CompileBudget(), LATENCY_BUDGET, FlopBudget(), BenchmarkSuite())
)
#: fixtures that time the test body, which must therefore run once
TIMING_FIXTURES = ("latency", "perf_baseline", CASE_FIXTURE)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_perf")


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser, _summaries())


def _summaries() -> dict[str, str]:
    return {name: engine.summary for name, engine in ENGINES.items()}


def _settings(config: pytest.Config) -> PerfSettings:
    """The session's settings, read once (a usage error for a bad option)."""
    if settings_key not in config.stash:
        config.stash[settings_key] = options.read_settings(config, _summaries())
    return config.stash[settings_key]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """A baseline file the run could not use stops it here, once, before any test runs;
    then the session's engine may run it another way (instruction counts: again, under
    Valgrind), and return its exit status."""
    settings = _settings(config)
    session = PerfSession(settings, ENGINES[settings.measure])
    if not options.measures_nothing(config):
        session.check_file()  # the file read here serves the run's lookups
    config.stash[session_key] = session
    return session.engine.launch(config)


def pytest_configure(config: pytest.Config) -> None:
    CHECKS.configure(config)
    settings = _settings(config)
    if settings.threads_warning is not None:  # in the header, and the summary for -q
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(settings.threads_warning), stacklevel=2
        )
    session = config.stash.get(session_key, None)  # made at start-up (not in xdist workers)
    if session is None:
        session = PerfSession(settings, ENGINES[settings.measure])
        config.stash[session_key] = session
    config.pluginmanager.register(_ResultCollector(session), "torch_perf_results")


class _ResultCollector:
    """Gathers the perf records of every report, also those sent by xdist workers."""

    def __init__(self, session: PerfSession) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.user_properties:
            results.collect(self.session, report.when, report.skipped, report.user_properties)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return config.stash[session_key].header()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    CHECKS.collect(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    CHECKS.collected(config, items)
    session = config.stash[session_key]
    if session.settings.benchmark:
        return
    # benchmark cases are exactly the items using the case fixture (a cheap check)
    kept = [item for item in items if CASE_FIXTURE not in getattr(item, "fixturenames", ())]
    if len(kept) != len(items):
        deselected = [item for item in items if CASE_FIXTURE in getattr(item, "fixturenames", ())]
        session.benchmarks_deselected = len(deselected)
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    deselected = config.stash[session_key].benchmarks_deselected
    if deselected:
        return (
            f"torch benchmark: {deselected} benchmark case(s) deselected;"
            f" run them with {options.BENCHMARK}"
        )
    return None


@pytest.fixture
def torch_benchmark_case(request: pytest.FixtureRequest) -> Case:
    """The device, dtype, mode and batch size of one benchmark case (set by the plugin)."""
    case: Case | None = getattr(request, "param", None)
    if case is None:  # a unittest.TestCase method: never parametrized into cases
        pytest.fail(
            f"{request.node.nodeid}: @benchmark_suite works on plain test functions, which"
            f" pytest parametrizes into one case per batch size, dtype and mode; a"
            f" unittest.TestCase method cannot be. Declare the suite as a module-level"
            f" function: @benchmark_suite(batch_sizes=[1, 8]) def bench_x(batch_size): ...",
            pytrace=False,
        )
    return case


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> Callable[..., LatencyResult]:
    """Measure ``latency(model_or_callable, *inputs, **kwargs)`` and return the result.

    Modules run in inference mode, callables as given. With
    ``@pytest.mark.torch_max_latency(ms=...)`` the call fails when the budget's
    statistic is over ``ms``.
    """
    return fixtures.latency_measurer(request.node, request.config.stash[session_key])


@pytest.fixture
def perf_baseline(request: pytest.FixtureRequest) -> Callable[..., Outcome]:
    """Record (``--torch-update-perf``) or compare one call with the session's engine.

    ``perf_baseline(model_or_callable, *inputs, name=None, **tolerances)``: the wall
    clock compares latency and peak memory (``latency_tolerance=``,
    ``memory_tolerance=``), instruction counts ``instruction_tolerance=``, FLOP counts
    ``flop_tolerance=``; a regression is ``new > baseline * (1 + tolerance) + slack``
    (the rule and the default tolerances: ``pytest_torch.perf.rule``).
    """
    return fixtures.baseline_checker(request.node, request.config.stash[session_key])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is None:
        return
    for title, lines in results.summary(session):
        if title is not None:
            terminalreporter.write_sep("-", title)
        for line in lines:
            terminalreporter.write_line(line)


def pytest_torch_runs_once(
    config: pytest.Config, nodeid: str, fixturenames: Sequence[str]
) -> str | None:
    """A test that measures performance must not be repeated (by a leak check)."""
    for name in TIMING_FIXTURES:
        if name in fixturenames:
            return f"it uses {name}, which measures performance"
    return None


def pytest_torch_reach_lines(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(session_key, None)
    return None if session is None else results.reach_lines(session)


def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The perf and benchmark tables, for the reports other plugins write."""
    session = config.stash.get(session_key, None)
    return None if session is None else results.report_tables(session)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller: hand each worker this run's command line, from which a worker
    starts a fresh process like this run (see ``engines.wall.fresh_process``)."""
    node.workerinput[WORKER_ARGS] = invocation_of(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: take over the baselines a worker recorded."""
    recordings = getattr(node, "workeroutput", {}).get(results.WORKER_RECORDINGS)
    if recordings:
        results.take_over(node.config.stash[session_key], recordings)


def pytest_sessionfinish(session: pytest.Session) -> None:
    perf = session.config.stash.get(session_key, None)
    if perf is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller writes the files
        results.hand_to_controller(perf, workeroutput)
        return
    if perf.benchmark_results:
        results.write_benchmark_outputs(perf)
    error = results.write_baselines(perf)
    if error is not None:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(f"ERROR: {error}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
