"""The perf plugin's options: declared (each flag named once, with its ini twin) and
read into the session's :class:`settings.PerfSettings`, or a usage error that names the
option, the value and an example. No torch here: this runs on every pytest start-up."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_torch.core.cpus import available_cores, overrun
from pytest_torch.core.options import (
    Option,
    Parse,
    number,
    switch,
    text,
    unparsed,
    whole,
)
from pytest_torch.core.paths import unwritable
from pytest_torch.core.session import xdist_worker
from pytest_torch.perf.rule import DEFAULT_INSTRUCTION_SLACK, DEFAULT_INSTRUCTION_TOLERANCE
from pytest_torch.perf.settings import PerfSettings

#: the perf flags, each named once
MEASURE = "--torch-perf-measure"
INSTRUCTION_TOLERANCE = "--torch-perf-instruction-tolerance"
SLACK_INSTRUCTIONS = "--torch-perf-slack-instructions"
UPDATE = "--torch-update-perf"
STRICT = "--torch-perf-strict"
BASELINES = "--torch-perf-baselines"
MAX_TIME = "--torch-perf-max-time"
BUSY_MAX_TIME = "--torch-perf-busy-max-time"
MIN_UNDISTURBED = "--torch-perf-min-undisturbed"
FRESH_PROCESSES = "--torch-perf-fresh-processes"
BENCHMARK = "--torch-benchmark"
BENCHMARK_JSON = "--torch-benchmark-json"
BENCHMARK_PLOT = "--torch-benchmark-plot"
THREADS = "--torch-perf-threads"
SLACK_MS = "--torch-perf-slack-ms"


def writable(*, folder: bool = False) -> Parse[Path | None]:
    """A path the run writes (a file, or a ``folder``), relative to where pytest was
    started; None when unset; a usage error when it cannot be written."""

    def parse(option: Option[Any], config: pytest.Config, value: Any) -> Path | None:
        if not value:
            return None
        path = Path(str(value))
        path = path if path.is_absolute() else config.invocation_params.dir / path
        problem = unwritable(path, folder=folder)
        if problem is not None:
            raise option.error(config, f"cannot write {path}: {problem}. Choose a writable path.")
        return path

    return parse


#: in ``--help`` order, after --torch-perf-measure (which names the engines)
INSTRUCTION_TOLERANCE_OPTION = Option(
    INSTRUCTION_TOLERANCE,
    "torch_perf_instruction_tolerance",
    "With --torch-perf-measure=instructions: how many more instructions than its"
    " baseline a call may count before it is a regression (0.01 allows 1 percent more).",
    parse=number(zero=True, example=f"{DEFAULT_INSTRUCTION_TOLERANCE:g}"),
    default=f"{DEFAULT_INSTRUCTION_TOLERANCE:g}",
    metavar="FRACTION",
)
SLACK_INSTRUCTIONS_OPTION = Option(
    SLACK_INSTRUCTIONS,
    "torch_perf_slack_instructions",
    "With --torch-perf-measure=instructions: instructions added to the regression"
    " limit, for tiny calls.",
    parse=whole(minimum=0, example=DEFAULT_INSTRUCTION_SLACK),
    default=str(DEFAULT_INSTRUCTION_SLACK),
    metavar="N",
)
UPDATE_OPTION = Option(
    UPDATE,
    "torch_update_perf",
    "Record perf baselines for this machine instead of comparing.",
    parse=switch,
    kind="switch",
)
STRICT_OPTION = Option(
    STRICT,
    "torch_perf_strict",
    "Fail, instead of skip, perf tests without a comparable baseline.",
    parse=switch,
    kind="switch",
)
BASELINES_OPTION = Option(
    BASELINES,
    "torch_perf_baselines",
    "Baseline file, relative to the rootdir.",
    parse=text,
    default=".torch-perf-baselines.json",
    metavar="PATH",
)
MAX_TIME_OPTION = Option(
    MAX_TIME,
    "torch_perf_max_time",
    "Longest time one latency measurement samples (warm-up not included).",
    parse=number(),
    default="1.0",
    metavar="SECONDS",
)
BUSY_MAX_TIME_OPTION = Option(
    BUSY_MAX_TIME,
    "torch_perf_busy_max_time",
    "On a busy machine, how long one measurement may sample in all to collect"
    " enough undisturbed samples (at least --torch-perf-max-time).",
    parse=number(example="3.0"),
    default="3.0",
    metavar="SECONDS",
)
MIN_UNDISTURBED_OPTION = Option(
    MIN_UNDISTURBED,
    "torch_perf_min_undisturbed",
    "Undisturbed samples (adding up to 20 ms or more) a measurement needs to be"
    " judged and recorded from them; with fewer it is busy.",
    parse=whole(minimum=1, example=5),
    default="5",
    metavar="N",
)
FRESH_PROCESSES_OPTION = Option(
    FRESH_PROCESSES,
    "torch_perf_fresh_processes",
    "Before a call under 1 ms fails for being less than 2.5x its baseline, measure"
    " it again in a fresh process (address layout alone can slow a short call up to"
    " 1.8x in one process); at most N per run and xdist worker, 0: never.",
    parse=whole(minimum=0, example=10),
    default="10",
    metavar="N",
)
BENCHMARK_OPTION = Option(
    BENCHMARK,
    "torch_benchmark",
    "Run the @benchmark_suite cases (deselected otherwise, to keep runs fast).",
    parse=switch,
    kind="switch",
)
BENCHMARK_JSON_OPTION = Option(
    BENCHMARK_JSON,
    "torch_benchmark_json",
    "Write every benchmark case's figures and the machine fingerprint as JSON.",
    parse=writable(),
    metavar="PATH",
)
BENCHMARK_PLOT_OPTION = Option(
    BENCHMARK_PLOT,
    "torch_benchmark_plot",
    "Draw one PNG per benchmark suite (latency and throughput by batch size).",
    parse=writable(folder=True),
    metavar="DIR",
)
THREADS_OPTION = Option(
    THREADS,
    "torch_perf_threads",
    "torch intra-op threads while latency, perf_baseline and benchmark suites"
    " measure (restored after), so timings compare with and without -n.",
    parse=whole(minimum=1, example=1),
    default="1",
    metavar="N",
)
SLACK_MS_OPTION = Option(
    SLACK_MS,
    "torch_perf_slack_ms",
    "Absolute slack added to the regression limit, for tiny timings.",
    parse=number(zero=True, example="0.001"),
    default="0.001",
    metavar="MS",
)
OPTIONS: tuple[Option[Any], ...] = (
    INSTRUCTION_TOLERANCE_OPTION,
    SLACK_INSTRUCTIONS_OPTION,
    UPDATE_OPTION,
    STRICT_OPTION,
    BASELINES_OPTION,
    MAX_TIME_OPTION,
    BUSY_MAX_TIME_OPTION,
    MIN_UNDISTURBED_OPTION,
    FRESH_PROCESSES_OPTION,
    BENCHMARK_OPTION,
    BENCHMARK_JSON_OPTION,
    BENCHMARK_PLOT_OPTION,
    THREADS_OPTION,
    SLACK_MS_OPTION,
)


#: options of runs that measure nothing (no baseline file read, no Valgrind started)
_NOTHING_MEASURED = ("help", "version", "collectonly", "showfixtures", "show_fixtures_per_test",
                     "markers")  # fmt: skip


def measures_nothing(config: pytest.Config) -> bool:
    """Whether the run only shows something (help, markers, the collected tests)."""
    return any(config.getoption(name, default=None) for name in _NOTHING_MEASURED)


def add_options(parser: pytest.Parser, engines: Mapping[str, str]) -> None:
    """Declare the perf options, each with its ini twin, in one ``--help`` group
    (``engines``: each measurement engine's name and what it measures)."""
    group = parser.getgroup("torch-perf", "torch-perf: latency budgets and perf baselines")
    for option in (measure_option(engines), *OPTIONS):
        option.add(parser, group)


def measure_option(engines: Mapping[str, str]) -> Option[Any]:
    """--torch-perf-measure, whose help names every engine; the first is the default
    (its value is checked against them by :func:`measure_mode`)."""
    *others, last = [f"{name} ({summary})" for name, summary in engines.items()]
    return Option(
        MEASURE,
        "torch_perf_measure",
        f"What perf_baseline and benchmark suites measure and compare: {', '.join(others)}"
        f" or {last}. Latency budgets stay wall-clock.",
        parse=unparsed,
        default=next(iter(engines)),
        metavar="MODE",
    )


def read_settings(config: pytest.Config, engines: Mapping[str, str]) -> PerfSettings:
    """The session's settings from its options (``engines``: each engine's name, the
    values --torch-perf-measure takes, and what it measures); a usage error for a bad
    one."""
    path = Path(BASELINES_OPTION.read(config) or "")
    threads = THREADS_OPTION.read(config)
    settings = PerfSettings(
        measure=measure_mode(config, engines),
        tolerances=(("instruction_tolerance", INSTRUCTION_TOLERANCE_OPTION.read(config)),),
        slack_instructions=SLACK_INSTRUCTIONS_OPTION.read(config),
        update=UPDATE_OPTION.read(config),
        strict=STRICT_OPTION.read(config),
        baseline_path=path if path.is_absolute() else config.rootpath / path,
        max_time=MAX_TIME_OPTION.read(config),
        slack_ms=SLACK_MS_OPTION.read(config),
        threads=threads,
        threads_warning=None if xdist_worker(config) else threads_warning(config, threads),
        busy_max_time=BUSY_MAX_TIME_OPTION.read(config),
        min_undisturbed=MIN_UNDISTURBED_OPTION.read(config),
        fresh_processes=FRESH_PROCESSES_OPTION.read(config),
        benchmark=BENCHMARK_OPTION.read(config),
        benchmark_json=BENCHMARK_JSON_OPTION.read(config),
        benchmark_plot=BENCHMARK_PLOT_OPTION.read(config),
    )
    if settings.benchmark_plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise pytest.UsageError(
            f"{BENCHMARK_PLOT} draws with matplotlib, which is not installed:"
            ' pip install matplotlib (or pip install "pytest-torch[perf]")'
        )
    return settings


def measure_mode(config: pytest.Config, engines: Mapping[str, str]) -> str:
    """``--torch-perf-measure``: one of the ``engines``; a usage error naming its source."""
    option = measure_option(engines)
    value = str(option.raw(config)).strip()
    if value not in engines:
        default, *others = engines
        choices = "; ".join(f"{MEASURE}={name}: {engines[name]}" for name in others)
        raise option.error(
            config,
            f"expected one of {', '.join(engines)}, got {value!r}."
            f" Example: {choices}; {default}, the default: {engines[default]}",
        )
    return value


def threads_warning(config: pytest.Config, threads: int) -> str | None:
    """A warning when the measuring threads of all workers overrun the cores."""
    workers = config.getoption("numprocesses", default=None)
    processes = workers if isinstance(workers, int) and workers > 0 else 1
    how = overrun(threads, processes, available_cores())
    if how is None:
        return None
    return (
        f"{THREADS}={threads}: {how} while measuring; measurements whose"
        f" threads wait for a CPU are not judged (machine busy). Use fewer threads or"
        f" fewer workers."
    )
