"""pytest wiring of the perf plugin (entry point ``torch_perf``).

Options, the ``torch_max_latency`` marker, the ``latency`` and ``perf_baseline``
fixtures, the end-of-run table and the baseline file updates. The measuring and the
judging live in ``calls``/``timing`` and ``checks``/``baselines``.
"""

from __future__ import annotations

import importlib.util
import math
import shlex
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini, option_or_ini

# The engines are imported where they are used: loading the plugin must stay cheap
# for suites that never time anything.
if TYPE_CHECKING:
    from pytest_torch.core.tables import ReportTable
    from pytest_torch.perf.baselines import Baseline, BaselineFile
    from pytest_torch.perf.checks import Outcome
    from pytest_torch.perf.records import PerfRecord
    from pytest_torch.perf.suites import Case, CaseResult
    from pytest_torch.perf.timing import LatencyResult, SamplingSettings

pytest_plugins = ["torch_core"]

MARKER = "torch_max_latency"
#: perf_baseline's default, also used by benchmark suites (checks.py would cost start-up)
DEFAULT_MEMORY_TOLERANCE = 0.1
_CASE_FIXTURE = "torch_benchmark_case"  # suites.CASE_FIXTURE, without importing the engine
RERECORD = "pytest --torch-update-perf"


class PerfSettings:
    """The perf options of a session, and what the session records."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(
        self,
        update: bool,
        strict: bool,
        baseline_path: Path,
        max_time: float,
        slack_ms: float,
        threads: int,
    ) -> None:
        self.update = update
        self.strict = strict
        self.baseline_path = baseline_path
        self.max_time = max_time
        self.slack_ms = slack_ms
        #: torch's intra-op threads while measuring (--torch-perf-threads)
        self.threads = threads
        self.threads_warning: str | None = None
        self.pending: dict[str, dict[str, Baseline]] = {}
        self.records: list[PerfRecord] = []
        self.benchmark = False
        self.benchmark_json: Path | None = None
        self.benchmark_plot: Path | None = None
        self.benchmark_results: list[CaseResult] = []
        self.benchmarks_deselected = 0
        self.benchmark_outputs: list[Path] = []
        self._file: BaselineFile | None = None
        self._machine: str | None = None
        self._calibrated = False

    def sampling(self) -> SamplingSettings:
        from pytest_torch.perf.timing import SamplingSettings

        return SamplingSettings(max_time=self.max_time)

    def file(self) -> BaselineFile:
        if self._file is None:
            from pytest_torch.perf.baselines import BaselineFile

            self._file = BaselineFile(self.baseline_path)
        return self._file

    def machine(self) -> str:
        if self._machine is None:
            from pytest_torch.core.fingerprint import hardware_fingerprint

            self._machine = hardware_fingerprint().key
        return self._machine

    def calibrate(self) -> None:
        """Before the session's first measurement: tell the interference monitor how
        fast its reference loop ran on this machine when baselines were recorded, so a
        process whose cores are slow from its first second is seen to be slow."""
        if self._calibrated:
            return
        self._calibrated = True
        import platform

        from pytest_torch.perf.baselines import BaselineFileError
        from pytest_torch.perf.contention import note_reference

        try:
            best = self.file().reference_loop_us(self.machine(), platform.python_version())
        except BaselineFileError:  # reported by the baseline checks that need the file
            return
        if best is not None:
            note_reference(best / 1e6)


settings_key = pytest.StashKey[PerfSettings]()
calls_key = pytest.StashKey[int]()
labels_key = pytest.StashKey[set[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_perf")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-perf", "torch-perf: latency budgets and perf baselines")
    add_flag_with_ini(
        parser,
        group,
        "--torch-update-perf",
        ini="torch_update_perf",
        help="Record perf baselines for this machine instead of comparing.",
    )
    add_flag_with_ini(
        parser,
        group,
        "--torch-perf-strict",
        ini="torch_perf_strict",
        help="Fail, instead of skip, perf tests without a comparable baseline.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-baselines",
        ini="torch_perf_baselines",
        default=".torch-perf-baselines.json",
        metavar="PATH",
        help="Baseline file, relative to the rootdir.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-max-time",
        ini="torch_perf_max_time",
        default="1.0",
        metavar="SECONDS",
        help="Longest time one latency measurement samples (warm-up not included).",
    )
    add_flag_with_ini(
        parser,
        group,
        "--torch-benchmark",
        ini="torch_benchmark",
        help="Run the @benchmark_suite cases (deselected otherwise, to keep runs fast).",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-benchmark-json",
        ini="torch_benchmark_json",
        default=None,
        metavar="PATH",
        help="Write every benchmark case's figures and the machine fingerprint as JSON.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-benchmark-plot",
        ini="torch_benchmark_plot",
        default=None,
        metavar="DIR",
        help="Draw one PNG per benchmark suite (latency and throughput by batch size).",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-threads",
        ini="torch_perf_threads",
        default="1",
        metavar="N",
        help="torch intra-op threads while latency, perf_baseline and benchmark suites"
        " measure (restored after), so timings compare with and without -n.",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-slack-ms",
        ini="torch_perf_slack_ms",
        default="0.001",
        metavar="MS",
        help="Absolute slack added to the regression limit, for tiny timings.",
    )


def _positive_float(config: pytest.Config, ini: str, flag: str, *, zero: bool = False) -> float:
    value = option_or_ini(config, ini)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or not (number > 0 or (zero and number == 0)):
        expected = "a finite number >= 0" if zero else "a positive, finite number"
        raise pytest.UsageError(
            f"{flag} (ini {ini}): expected {expected}, got {value!r}. Example: {flag}=1.0"
        )
    return number


def _thread_count(config: pytest.Config) -> int:
    from pytest_torch.core.options import option_source

    value = option_or_ini(config, "torch_perf_threads")
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        source = option_source(config, "torch_perf_threads", "--torch-perf-threads")
        raise pytest.UsageError(
            f"{source}: expected a positive whole number of threads for perf measurements,"
            f" got {value!r}. Example: --torch-perf-threads=1 (the default: one thread is"
            f" the least disturbed by a busy machine and the same with or without -n)"
        )
    return int(text)


def _threads_warning(config: pytest.Config, threads: int) -> str | None:
    from pytest_torch.core.cpus import available_cores, overrun

    workers = config.getoption("numprocesses", default=None)
    processes = workers if isinstance(workers, int) and workers > 0 else 1
    how = overrun(threads, processes, available_cores())
    if how is None:
        return None
    return (
        f"--torch-perf-threads={threads}: {how} while measuring; measurements whose"
        f" threads wait for a CPU are not judged (machine busy). Use fewer threads or"
        f" fewer workers."
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(ms, stat='median'): fail the test if a latency(...) call in it takes"
        " longer than ms milliseconds (stat: median, mean, min, p90, p99).",
    )
    update = bool(option_or_ini(config, "torch_update_perf"))
    path = Path(str(option_or_ini(config, "torch_perf_baselines")))
    settings = PerfSettings(
        update=update,
        strict=bool(option_or_ini(config, "torch_perf_strict")),
        baseline_path=path if path.is_absolute() else config.rootpath / path,
        max_time=_positive_float(config, "torch_perf_max_time", "--torch-perf-max-time"),
        slack_ms=_positive_float(config, "torch_perf_slack_ms", "--torch-perf-slack-ms", zero=True),
        threads=_thread_count(config),
    )
    if not hasattr(config, "workerinput"):
        settings.threads_warning = _threads_warning(config, settings.threads)
        if settings.threads_warning is not None:  # in the header, and the summary for -q
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(settings.threads_warning), stacklevel=2
            )
    if update:
        from pytest_torch.perf.baselines import BaselineFileError

        try:
            settings.file().check_writable()  # refuse early rather than lose recordings
            settings.file().read()
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    settings.benchmark = bool(option_or_ini(config, "torch_benchmark"))
    settings.benchmark_json = _path_option(config, "torch_benchmark_json")
    settings.benchmark_plot = _path_option(config, "torch_benchmark_plot", folder=True)
    if settings.benchmark_plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise pytest.UsageError(
            "--torch-benchmark-plot draws with matplotlib, which is not installed:"
            ' pip install matplotlib (or pip install "pytest-torch[perf]")'
        )
    config.addinivalue_line(
        "markers",
        "torch_benchmark(batch_sizes, dtypes, modes, compile_options, latency_tolerance):"
        " set by @benchmark_suite; one test per device x dtype x mode x batch size, run with"
        " --torch-benchmark.",
    )
    config.stash[settings_key] = settings
    config.pluginmanager.register(_ResultCollector(settings), "torch_perf_results")


def _path_option(config: pytest.Config, ini: str, *, folder: bool = False) -> Path | None:
    from pytest_torch.core.paths import unwritable

    value = option_or_ini(config, ini)
    if not value:
        return None
    path = Path(str(value))
    path = path if path.is_absolute() else config.invocation_params.dir / path
    problem = unwritable(path, folder=folder)
    if problem is not None:
        flag = "--" + ini.replace("_", "-")
        raise pytest.UsageError(
            f"{flag} (ini {ini}): cannot write {path}: {problem}. Choose a writable path."
        )
    return path


class _ResultCollector:
    """Gathers the perf records of every report, also those sent by xdist workers."""

    def __init__(self, settings: PerfSettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.user_properties:
            return
        if report.when == "call" or (report.when == "setup" and report.skipped):
            from pytest_torch.perf.records import PerfRecord
            from pytest_torch.perf.suites import PROPERTY, CaseResult

            self.settings.records.extend(PerfRecord.from_properties(report.user_properties))
            self.settings.benchmark_results.extend(
                CaseResult.from_json(str(value))
                for name, value in report.user_properties
                if name == PROPERTY
            )


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash[settings_key]
    count = settings.threads
    lines = [
        f"torch perf: measurements on {count} intra-op thread{'s' if count != 1 else ''}"
        f" (--torch-perf-threads)"
    ]
    if settings.threads_warning is not None:
        lines.append(f"  WARNING: {settings.threads_warning}")
    return lines


def _budget(item: pytest.Item | pytest.Metafunc) -> Any:
    from pytest_torch.perf.checks import parse_budget

    node = item.definition if isinstance(item, pytest.Metafunc) else item
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    return parse_budget(marker.args, marker.kwargs, node.nodeid)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = {marker.name for marker in metafunc.definition.iter_markers()}
    if "torch_benchmark" in names:
        _parametrize_suite(metafunc)
    if MARKER not in names:
        return
    try:
        _budget(metafunc)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    if "latency" not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(
            f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER} needs the latency"
            f" fixture: add a `latency` argument and time the code with"
            f" latency(model, *inputs)"
        )


def _parametrize_suite(metafunc: pytest.Metafunc) -> None:
    from pytest_torch.core.selection import device_types_for
    from pytest_torch.perf.suites import CASE_FIXTURE, cases, parse_spec

    node_id = metafunc.definition.nodeid
    marker = metafunc.definition.get_closest_marker("torch_benchmark")
    assert marker is not None
    if CASE_FIXTURE not in metafunc.fixturenames:
        raise pytest.Collector.CollectError(
            f"{node_id}: declare benchmark suites with the @benchmark_suite(...) decorator"
            f" (from pytest_torch import benchmark_suite), not with the raw marker"
        )
    if "batch_size" not in metafunc.definition._fixtureinfo.argnames:
        raise pytest.Collector.CollectError(
            f"{node_id}: a @benchmark_suite function takes batch_size and returns (model,"
            f" inputs) for that batch size, e.g. def {metafunc.function.__name__}(batch_size):"
        )
    try:
        spec = parse_spec(marker.kwargs, node_id)
    except ValueError as exc:
        raise pytest.Collector.CollectError(str(exc)) from None
    try:
        chosen = cases(spec, device_types_for(metafunc.config, metafunc))
    except ValueError as exc:  # a malformed torch_devices marker
        raise pytest.Collector.CollectError(str(exc)) from None
    metafunc.parametrize(
        [CASE_FIXTURE, "batch_size"],
        [(case, case.batch_size) for case in chosen],
        ids=[case.id for case in chosen],
        indirect=[CASE_FIXTURE],
    )


@pytest.fixture
def torch_benchmark_case(request: pytest.FixtureRequest) -> Case:
    """The device, dtype, mode and batch size of one benchmark case (set by the plugin)."""
    case: Case = request.param
    return case


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if _CASE_FIXTURE not in pyfuncitem.funcargs:
        return None
    _run_case(pyfuncitem)
    return True


def _run_case(item: pytest.Function) -> None:
    __tracebackhide__ = True
    from pytest_torch.core import devices
    from pytest_torch.perf import suites
    from pytest_torch.perf.calls import measure_latency, peak_memory, torch_threads

    settings = item.config.stash[settings_key]
    case = cast("Case", item.funcargs[suites.CASE_FIXTURE])
    spec = case.spec
    assert spec is not None  # cases are made by _parametrize_suite
    device = devices.as_device(
        item.config.hook.pytest_torch_resolve_device(
            config=item.config, device_type=case.device_type
        )
    )
    result = suites.CaseResult(
        suite=item.nodeid.split("[")[0],
        test_id=item.nodeid,
        device=str(device),
        dtype=case.dtype,
        mode=case.mode,
        batch_size=case.batch_size,
        order=[
            spec.dtypes.index(case.dtype),
            spec.modes.index(case.mode),
            spec.batch_sizes.index(case.batch_size),
        ],
    )
    built = item.obj(**{arg: item.funcargs[arg] for arg in item._fixtureinfo.argnames})
    try:
        model, args, kwargs = suites.prepare(built, case, device, spec)
        with torch_threads(settings.threads):
            result.first_call_ms = suites.first_call(model, args, kwargs, case, device)
    except suites.CaseSkipped as skipped:
        result.status, result.reason = "skipped", str(skipped)
        item.user_properties.append((suites.PROPERTY, result.to_json()))
        pytest.skip(str(skipped))

    taken: list[tuple[LatencyResult, dict[str, int]]] = []

    def measure() -> tuple[LatencyResult, dict[str, int]]:
        latency = measure_latency(
            model,
            *args,
            settings=settings.sampling(),
            device=device,
            threads=settings.threads,
            **kwargs,
        )
        taken.append((latency, peak_memory(model, args, kwargs, settings.threads)))
        return taken[-1]

    outcome = baseline_check(
        settings,
        item.nodeid,
        item.nodeid,
        measure,
        spec.latency_tolerance,
        DEFAULT_MEMORY_TOLERANCE,
    )
    if not taken:  # no comparable baseline: the figures are still the point
        measure()
    # the figures of the measurement that decided (the one recorded, or the last judged)
    latency, memory = next(((r, m) for r, m in taken if r is outcome.measured), taken[-1])
    result.add_measurement(latency)
    result.peak_memory = memory
    result.baseline_ms = outcome.record.reference_ms
    result.change_pct = outcome.record.change_pct
    result.stat = outcome.record.stat
    result.verdict = outcome.record.verdict
    item.user_properties.append((suites.PROPERTY, result.to_json()))
    if outcome.status == "fail":
        raise outcome.error()
    if outcome.status == "skip" and outcome.record.verdict != "no baseline":
        pytest.skip(outcome.message)  # not comparable or not judged: say so


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    # a marked test always uses the latency fixture (checked at collection): test that first
    if (
        "latency" in getattr(item, "fixturenames", ())
        and item.stash.get(calls_key, 0) == 0
        and item.get_closest_marker(MARKER) is not None
    ):
        pytest.fail(
            f"{item.nodeid} is marked @pytest.mark.{MARKER} but never called"
            f" latency(...), so nothing was checked against the budget. Time the code"
            f" under budget with latency(model, *inputs), or remove the marker.",
            pytrace=False,
        )


def _label(item: pytest.Item, name: str | None, kind: str) -> str:
    labels = item.stash.setdefault(labels_key, set())
    label = item.nodeid if name is None else f"{item.nodeid}::{name}"
    if kind == "latency":
        base, count = label, 2
        while label in labels:
            label, count = f"{base}#{count}", count + 1
    elif label in labels:
        raise ValueError(
            f"perf_baseline was called twice for {label}; give each call in a test its own"
            f" name=, e.g. perf_baseline(model, x, name='batch32')"
        )
    labels.add(label)
    return label


def _publish(item: pytest.Item, record: PerfRecord) -> None:
    item.user_properties.extend(record.to_properties())


@pytest.fixture
def latency(request: pytest.FixtureRequest) -> Callable[..., LatencyResult]:
    """Measure ``latency(model_or_callable, *inputs, **kwargs)`` and return the result.

    Modules run in inference mode, callables as given. With
    ``@pytest.mark.torch_max_latency(ms=...)`` the call fails when the budget's
    statistic is over ``ms``.
    """
    item = request.node
    settings = request.config.stash[settings_key]
    budget = _budget(item)

    def measure(target: Any, *inputs: Any, **kwargs: Any) -> LatencyResult:
        __tracebackhide__ = True
        from pytest_torch.perf.calls import measure_latency
        from pytest_torch.perf.checks import check_budget

        item.stash[calls_key] = item.stash.get(calls_key, 0) + 1
        settings.calibrate()

        def once() -> LatencyResult:
            return measure_latency(
                target, *inputs, settings=settings.sampling(), threads=settings.threads, **kwargs
            )

        if budget is None:
            return once()
        outcome = check_budget(_label(item, None, "latency"), once, budget, settings.strict)
        _publish(item, outcome.record)
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        if outcome.status == "fail":
            raise outcome.error()
        assert outcome.measured is not None
        return outcome.measured

    return measure


def baseline_check(
    settings: PerfSettings,
    node_id: str,
    label: str,
    measure: Callable[[], tuple[LatencyResult, dict[str, int]]],
    latency_tolerance: float,
    memory_tolerance: float,
) -> Outcome:
    """Record (``--torch-update-perf``) or compare one measured thing; never raises for
    a regression: the outcome says "pass", "fail" or "skip"."""
    __tracebackhide__ = True
    import torch

    from pytest_torch.perf import checks
    from pytest_torch.perf.baselines import BaselineFileError

    torch_version = str(torch.__version__).split("+")[0]
    settings.calibrate()
    if settings.update:
        outcome = checks.record(label, measure, torch_version, settings.strict)
        if outcome.baseline is not None:
            settings.pending.setdefault(settings.machine(), {})[label] = outcome.baseline
        return outcome
    try:
        baseline = settings.file().lookup(settings.machine(), label)
    except BaselineFileError as exc:
        raise checks.PerfRegressionError(str(exc)) from None
    if baseline is None:
        return checks.missing_outcome(label, settings.machine(), settings.strict)
    return checks.compare(
        label,
        baseline,
        measure,
        threads=settings.threads,
        torch_version=torch_version,
        tolerance=latency_tolerance,
        memory_tolerance=memory_tolerance,
        slack_ms=settings.slack_ms,
        strict=settings.strict,
        machine=settings.machine(),
        rerecord=f"{RERECORD} {shlex.quote(node_id)}",
    )


@pytest.fixture
def perf_baseline(request: pytest.FixtureRequest) -> Callable[..., Outcome]:
    """Record (``--torch-update-perf``) or compare latency and peak memory.

    ``perf_baseline(model_or_callable, *inputs, latency_tolerance=0.3,
    memory_tolerance=0.1, name=None)``: a regression is ``new > baseline * (1 +
    tolerance) + slack``, confirmed by a second measurement before the test fails.
    """
    item = request.node
    settings = request.config.stash[settings_key]

    def check(
        target: Any,
        *inputs: Any,
        latency_tolerance: float = 0.3,
        memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE,
        name: str | None = None,
    ) -> Outcome:
        __tracebackhide__ = True
        from pytest_torch.perf.calls import measure_latency, peak_memory
        from pytest_torch.perf.checks import finite_number

        for label_, value in (
            ("latency_tolerance", latency_tolerance),
            ("memory_tolerance", memory_tolerance),
        ):
            if not finite_number(value) or value < 0:
                raise ValueError(
                    f"perf_baseline: {label_} must be a finite number >= 0, got {value!r}"
                    f" (0.3 allows 30 % more than the baseline)"
                )
        label = _label(item, name, "baseline")

        def measure() -> tuple[LatencyResult, dict[str, int]]:
            result = measure_latency(
                target, *inputs, settings=settings.sampling(), threads=settings.threads
            )
            return result, peak_memory(target, inputs, {}, settings.threads)

        outcome = baseline_check(
            settings, item.nodeid, label, measure, float(latency_tolerance), float(memory_tolerance)
        )
        _publish(item, outcome.record)
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        if outcome.status == "fail":
            raise outcome.error()
        return outcome

    return check


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    if settings.records:
        from pytest_torch.perf.records import render_table

        terminalreporter.write_sep("-", "torch perf")
        for line in render_table(settings.records):
            terminalreporter.write_line(line)
    if settings.benchmark_results:
        from pytest_torch.perf.suite_report import render

        terminalreporter.write_sep("-", "torch benchmark")
        for line in render(settings.benchmark_results, settings.machine()):
            terminalreporter.write_line(line)
        for path in settings.benchmark_outputs:
            terminalreporter.write_line(f"benchmark output: {path}")
    written = sum(len(tests) for tests in settings.pending.values())
    if written:
        terminalreporter.write_line(
            f"recorded {written} perf baseline(s) for this machine in {settings.baseline_path}"
        )


#: fixtures that time the test body, which must therefore run once
TIMING_FIXTURES = ("latency", "perf_baseline", _CASE_FIXTURE)


@pytest.hookimpl(optionalhook=True)
def pytest_torch_runs_once(
    config: pytest.Config, nodeid: str, fixturenames: Sequence[str]
) -> str | None:
    """A test that measures performance must not be repeated (by a leak check)."""
    for name in TIMING_FIXTURES:
        if name in fixturenames:
            return f"it uses {name}, which measures performance"
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_torch_report_tables(config: pytest.Config) -> list[ReportTable] | None:
    """The perf and benchmark tables, for the reports other plugins write."""
    from pytest_torch.core.tables import ReportTable

    settings = config.stash.get(settings_key, None)
    if settings is None:
        return None
    tables = []
    if settings.records:
        from pytest_torch.perf.records import render_table

        tables.append(ReportTable("Performance", lambda: render_table(settings.records)))
    if settings.benchmark_results:
        from pytest_torch.perf.suite_report import render

        results = settings.benchmark_results
        tables.append(ReportTable("Benchmarks", lambda: render(results, settings.machine())))
    return tables


#: where an xdist worker hands its recordings to the controller, which writes them once
WORKER_RECORDINGS = "torch_perf_recordings"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: take over the baselines a worker recorded."""
    recordings = getattr(node, "workeroutput", {}).get(WORKER_RECORDINGS)
    if not recordings:
        return
    from pytest_torch.perf.baselines import Baseline

    pending = node.config.stash[settings_key].pending
    for machine, tests in recordings.items():
        for label, entry in tests.items():
            pending.setdefault(machine, {})[label] = Baseline.from_json(entry, label)


def pytest_sessionfinish(session: pytest.Session) -> None:
    settings = session.config.stash.get(settings_key, None)
    if settings is None:
        return
    workeroutput = getattr(session.config, "workeroutput", None)
    if settings.benchmark_results and workeroutput is None:
        _write_benchmark_outputs(settings)
    if workeroutput is not None:  # an xdist worker: the controller writes the file
        if settings.pending:
            workeroutput[WORKER_RECORDINGS] = {
                machine: {label: entry.to_json() for label, entry in tests.items()}
                for machine, tests in settings.pending.items()
            }
        return
    if not settings.pending:
        return
    from pytest_torch.perf.baselines import BaselineFileError

    try:
        settings.file().merge(settings.pending)
    except BaselineFileError as exc:
        settings.pending.clear()
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(f"ERROR: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _write_benchmark_outputs(settings: PerfSettings) -> None:
    from pytest_torch.core.fingerprint import hardware_fingerprint
    from pytest_torch.perf.suite_report import write_json, write_plots

    if settings.benchmark_json is not None:
        write_json(
            settings.benchmark_json, settings.benchmark_results, hardware_fingerprint().to_dict()
        )
        settings.benchmark_outputs.append(settings.benchmark_json)
    if settings.benchmark_plot is not None:
        settings.benchmark_outputs += write_plots(
            settings.benchmark_plot, settings.benchmark_results, settings.machine()
        )
