"""pytest wiring of the perf plugin (entry point ``torch_perf``): options (declared in
``options``), markers (declared in ``markers``), fixtures and hooks. The work lives in
plain modules: ``settings`` (the options' values), ``check_runner`` (latency budgets and
baseline checks in a test), ``suites.runner`` (benchmark cases), ``session_results``
(records gathered from the reports, xdist hand-over, files written at the end).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.ondemand import register_once
from pytest_torch.perf import session_results
from pytest_torch.perf.markers import BENCHMARK, COMPILE_BUDGET, LATENCY
from pytest_torch.perf.settings import PerfSettings, read_settings, settings_key

# engines are imported where used: loading the plugin stays cheap for suites that never time
if TYPE_CHECKING:
    from pytest_torch.core.tables import ReportTable
    from pytest_torch.perf.checks import Outcome
    from pytest_torch.perf.measure.timing import LatencyResult
    from pytest_torch.perf.suites.cases import Case

pytest_plugins = ["torch_core"]

_CASE_FIXTURE = "torch_benchmark_case"  # suites.cases.CASE_FIXTURE, without importing it
#: fixtures that time the test body, which must therefore run once
TIMING_FIXTURES = ("latency", "perf_baseline", _CASE_FIXTURE)
#: the per-test hooks, registered once a test has a latency budget or is a benchmark case
RUNNER = "torch_perf_runner"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_perf")


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_torch.perf.options import add_options

    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--torch-perf-measure=instructions``: run this session under Valgrind instead
    (see ``measure.valgrind``), and return its exit status."""
    from pytest_torch.perf.settings import measure_mode

    if measure_mode(config) != "instructions":
        return None
    from pytest_torch.perf.instruction_session import launch

    return launch(config)


def pytest_configure(config: pytest.Config) -> None:
    LATENCY.register(config)
    BENCHMARK.register(config)
    COMPILE_BUDGET.register(config)
    settings = read_settings(config)
    config.stash[settings_key] = settings
    config.pluginmanager.register(_ResultCollector(settings), "torch_perf_results")


class _ResultCollector:
    """Gathers the perf records of every report, also those sent by xdist workers."""

    def __init__(self, settings: PerfSettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.user_properties:
            session_results.collect(
                self.settings, report.when, report.skipped, report.user_properties
            )


def pytest_report_header(config: pytest.Config) -> list[str]:
    return config.stash[settings_key].header()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = {marker.name for marker in metafunc.definition.iter_markers()}
    if names & {"torch_benchmark", LATENCY.name, COMPILE_BUDGET.name}:
        register_once(metafunc.config, RUNNER, _Runner)
    if "torch_benchmark" in names:
        from pytest_torch.perf.suites.runner import parametrize_suite

        parametrize_suite(metafunc)
    if LATENCY.name in names:
        from pytest_torch.perf import check_runner

        check_runner.check_marked(metafunc)
    if COMPILE_BUDGET.name in names:
        from pytest_torch.perf.compilation import runner as compile_runner

        compile_runner.check_marked(metafunc)


class _Runner:
    """The per-test hooks, registered only once a test needs them (a latency budget, a
    benchmark case, a compile budget), so suites that never measure pay nothing per test."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        from pytest_torch.perf import check_runner
        from pytest_torch.perf.compilation import runner as compile_runner

        _note_latency_reach(item)
        watch = compile_runner.start(item)
        try:
            yield
        except BaseException as raised:
            compile_runner.finish(item, watch, raised)
            raise
        failure = compile_runner.finish(item, watch)
        failure = failure or check_runner.budget_unused(item)
        if failure is not None:
            pytest.fail(failure, pytrace=False)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        if _CASE_FIXTURE not in pyfuncitem.funcargs:
            return None
        from pytest_torch.perf.suites.runner import run_case

        run_case(pyfuncitem, pyfuncitem.config.stash[settings_key])
        return True


def _note_latency_reach(item: pytest.Item) -> None:
    """Whether a latency budget could act on the test, for the end of the run: a
    unittest.TestCase method cannot request the latency fixture that checks it."""
    if LATENCY.mark_on(item) is None:
        return
    from pytest_torch.core import reach
    from pytest_torch.core.testkinds import is_unittest

    check = f"@pytest.mark.{LATENCY.name}"
    if is_unittest(item):
        reach.not_acted(item, check, UNITTEST_LATENCY)
    else:
        reach.acted(item, check)


#: why a latency budget cannot act on a unittest.TestCase method
UNITTEST_LATENCY = (
    "a unittest.TestCase method cannot request the latency fixture that times code"
    " under the budget; time the step in a plain test function: def test_x(latency):"
    " latency(model, inputs)"
)


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # unittest.TestCase methods never reach pytest_generate_tests: their compile budget
    # is seen here (and its arguments checked when the test runs), and their latency
    # budget, which cannot act on them (the end of the run says so)
    if any(COMPILE_BUDGET.mark_on(item) or LATENCY.mark_on(item) for item in items):
        register_once(config, RUNNER, _Runner)
    settings = config.stash[settings_key]
    if settings.benchmark:
        return
    # benchmark cases are exactly the items using the case fixture (a cheap check)
    kept = [item for item in items if _CASE_FIXTURE not in getattr(item, "fixturenames", ())]
    if len(kept) != len(items):
        deselected = [item for item in items if _CASE_FIXTURE in getattr(item, "fixturenames", ())]
        settings.benchmarks_deselected = len(deselected)
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    settings = config.stash[settings_key]
    if settings.benchmarks_deselected:
        return (
            f"torch benchmark: {settings.benchmarks_deselected} benchmark case(s) deselected;"
            f" run them with --torch-benchmark"
        )
    return None


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> Callable[..., LatencyResult]:
    """Measure ``latency(model_or_callable, *inputs, **kwargs)`` and return the result.

    Modules run in inference mode, callables as given. With
    ``@pytest.mark.torch_max_latency(ms=...)`` the call fails when the budget's
    statistic is over ``ms``.
    """
    from pytest_torch.perf import check_runner

    return check_runner.latency_measurer(request.node, request.config.stash[settings_key])


@pytest.fixture
def perf_baseline(request: pytest.FixtureRequest) -> Callable[..., Outcome]:
    """Record (``--torch-update-perf``) or compare latency and peak memory.

    ``perf_baseline(model_or_callable, *inputs, latency_tolerance=...,
    memory_tolerance=..., name=None)``: a regression is ``new > baseline * (1 +
    tolerance) + slack``, confirmed by a second measurement before the test fails (the
    rule and the default tolerances: ``pytest_torch.perf.rule``).
    """
    from pytest_torch.perf import check_runner

    return check_runner.baseline_checker(request.node, request.config.stash[settings_key])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    for title, lines in session_results.summary(settings):
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
    settings = config.stash.get(settings_key, None)
    return None if settings is None else session_results.reach_lines(settings)


def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The perf and benchmark tables, for the reports other plugins write."""
    settings = config.stash.get(settings_key, None)
    return None if settings is None else session_results.report_tables(settings)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller: hand each worker this run's command line, from which a worker
    starts a fresh process like this run (see ``fresh_process``)."""
    from pytest_torch.perf.fresh_process import WORKER_ARGS, invocation_of

    node.workerinput[WORKER_ARGS] = invocation_of(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: take over the baselines a worker recorded."""
    output = getattr(node, "workeroutput", {})
    recordings = output.get(session_results.WORKER_RECORDINGS)
    counts = output.get(session_results.WORKER_COUNTS)
    if recordings or counts:
        session_results.take_over(node.config.stash[settings_key], recordings or {}, counts)


def pytest_sessionfinish(session: pytest.Session) -> None:
    settings = session.config.stash.get(settings_key, None)
    if settings is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller writes the files
        session_results.hand_to_controller(settings, workeroutput)
        return
    if settings.benchmark_results:
        session_results.write_benchmark_outputs(settings)
    error = session_results.write_baselines(settings)
    if error is not None:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(f"ERROR: {error}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
