"""pytest wiring of the perf plugin (entry point ``torch_perf``).

Options, the ``torch_max_latency`` marker, the ``latency`` and ``perf_baseline``
fixtures, the end-of-run table and the baseline file updates. The measuring and the
judging live in ``calls``/``timing`` and ``checks``/``baselines``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini, option_or_ini

# The engines are imported where they are used: loading the plugin must stay cheap
# for suites that never time anything.
if TYPE_CHECKING:
    from pytest_torch.perf.baselines import Baseline, BaselineFile
    from pytest_torch.perf.checks import Outcome
    from pytest_torch.perf.records import PerfRecord
    from pytest_torch.perf.timing import LatencyResult, SamplingSettings

pytest_plugins = ["torch_core"]

MARKER = "torch_max_latency"
RERECORD = "pytest --torch-update-perf"


class PerfSettings:
    """The perf options of a session, and what the session records."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(
        self, update: bool, strict: bool, baseline_path: Path, max_time: float, slack_ms: float
    ) -> None:
        self.update = update
        self.strict = strict
        self.baseline_path = baseline_path
        self.max_time = max_time
        self.slack_ms = slack_ms
        self.pending: dict[str, dict[str, Baseline]] = {}
        self.records: list[PerfRecord] = []
        self._file: BaselineFile | None = None
        self._machine: str | None = None

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
        help="Record perf baselines for this machine instead of comparing (no -n).",
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
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-slack-ms",
        ini="torch_perf_slack_ms",
        default="0.005",
        metavar="MS",
        help="Absolute slack added to the regression limit, for tiny timings.",
    )


def _positive_float(config: pytest.Config, ini: str, flag: str) -> float:
    value = option_or_ini(config, ini)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 and not (ini == "torch_perf_slack_ms" and number == 0):
        raise pytest.UsageError(
            f"{flag} (ini {ini}): expected a positive number, got {value!r}. Example: {flag}=1.0"
        )
    return number


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
        slack_ms=_positive_float(config, "torch_perf_slack_ms", "--torch-perf-slack-ms"),
    )
    if update and _under_xdist(config):
        raise pytest.UsageError(
            "--torch-update-perf cannot record under pytest-xdist (-n): timings taken"
            " while other workers share the machine are not a fair reference. Record"
            " without -n (e.g. pytest --torch-update-perf -n 0), then run in parallel."
        )
    if update:
        from pytest_torch.perf.baselines import BaselineFileError

        try:
            settings.file().read()  # refuse early rather than lose the recordings
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[settings_key] = settings
    config.pluginmanager.register(_ResultCollector(settings), "torch_perf_results")


class _ResultCollector:
    """Gathers the perf records of every report, also those sent by xdist workers."""

    def __init__(self, settings: PerfSettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.user_properties:
            return
        if report.when == "call" or (report.when == "setup" and report.skipped):
            from pytest_torch.perf.records import PerfRecord

            self.settings.records.extend(PerfRecord.from_properties(report.user_properties))


def _under_xdist(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput") or os.environ.get("PYTEST_XDIST_WORKER"):
        return True
    workers = config.getoption("numprocesses", default=None)
    return workers not in (None, 0, "0")


def _budget(item: pytest.Item | pytest.Metafunc) -> Any:
    from pytest_torch.perf.checks import parse_budget

    node = item.definition if isinstance(item, pytest.Metafunc) else item
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return None
    return parse_budget(marker.args, marker.kwargs, node.nodeid)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker(MARKER) is None:
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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    if item.get_closest_marker(MARKER) is not None and item.stash.get(calls_key, 0) == 0:
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
        from pytest_torch.perf.checks import PerfRegressionError, budget_failure, budget_record

        item.stash[calls_key] = item.stash.get(calls_key, 0) + 1
        result = measure_latency(target, *inputs, settings=settings.sampling(), **kwargs)
        if budget is not None:
            _publish(item, budget_record(_label(item, None, "latency"), result, budget))
            failure = budget_failure(result, budget)
            if failure is not None:
                raise PerfRegressionError(failure)
        return result

    return measure


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
        memory_tolerance: float = 0.1,
        name: str | None = None,
    ) -> Outcome:
        __tracebackhide__ = True
        import torch

        from pytest_torch.perf import checks
        from pytest_torch.perf.baselines import BaselineFileError
        from pytest_torch.perf.calls import measure_latency, peak_memory
        from pytest_torch.perf.checks import PerfRegressionError

        for label_, value in (
            ("latency_tolerance", latency_tolerance),
            ("memory_tolerance", memory_tolerance),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"perf_baseline: {label_} must be a number >= 0, got {value!r}")
        label = _label(item, name, "baseline")
        torch_version = str(torch.__version__).split("+")[0]

        def measure() -> tuple[LatencyResult, dict[str, int]]:
            result = measure_latency(target, *inputs, settings=settings.sampling())
            return result, peak_memory(target, inputs, {})

        if settings.update:
            recorded, memory = checks.record(measure, torch_version)
            settings.pending.setdefault(settings.machine(), {})[label] = recorded
            outcome = checks.record_outcome(label, recorded, memory)
            _publish(item, outcome.record)
            return outcome
        try:
            baseline = settings.file().lookup(settings.machine(), label)
        except BaselineFileError as exc:
            raise PerfRegressionError(str(exc)) from None
        if baseline is None:
            outcome = checks.missing_outcome(label, settings.machine(), settings.strict)
        else:
            outcome = checks.compare(
                label,
                baseline,
                measure,
                threads=torch.get_num_threads(),
                torch_version=torch_version,
                tolerance=float(latency_tolerance),
                memory_tolerance=float(memory_tolerance),
                slack_ms=settings.slack_ms,
                strict=settings.strict,
                machine=settings.machine(),
                rerecord=f"{RERECORD} {item.nodeid}",
            )
        _publish(item, outcome.record)
        if outcome.status == "skip":
            pytest.skip(outcome.message)
        if outcome.status == "fail":
            raise PerfRegressionError(outcome.message)
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
    written = sum(len(tests) for tests in settings.pending.values())
    if written:
        terminalreporter.write_line(
            f"recorded {written} perf baseline(s) for this machine in {settings.baseline_path}"
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    settings = session.config.stash.get(settings_key, None)
    if settings is None or not settings.pending:
        return
    from pytest_torch.perf.baselines import BaselineFileError

    try:
        settings.file().merge(settings.pending)
    except BaselineFileError as exc:
        settings.pending.clear()
        session.config.get_terminal_writer().line(f"ERROR: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
