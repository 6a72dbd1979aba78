"""The perf plugin's options: declared (each flag named once, with its ini twin) and
read into the session's :class:`settings.PerfSettings`, or a usage error that names the
option, the value and an example. No torch here: this runs on every pytest start-up."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

import pytest

from pytest_torch.core.cpus import available_cores, overrun
from pytest_torch.core.options import (
    add_flag_with_ini,
    add_option_with_ini,
    float_option,
    int_option,
    option_or_ini,
    option_source,
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

#: an option: flag, ini name, default, metavar (None: an on/off flag), help
Option = tuple[str, str, str | None, str | None, str]
#: in ``--help`` order, after --torch-perf-measure (which names the engines)
OPTIONS: tuple[Option, ...] = (
    (
        INSTRUCTION_TOLERANCE,
        "torch_perf_instruction_tolerance",
        f"{DEFAULT_INSTRUCTION_TOLERANCE:g}",
        "FRACTION",
        "With --torch-perf-measure=instructions: how many more instructions than its"
        " baseline a call may count before it is a regression (0.01 allows 1 percent more).",
    ),
    (
        SLACK_INSTRUCTIONS,
        "torch_perf_slack_instructions",
        str(DEFAULT_INSTRUCTION_SLACK),
        "N",
        "With --torch-perf-measure=instructions: instructions added to the regression"
        " limit, for tiny calls.",
    ),
    (
        UPDATE,
        "torch_update_perf",
        None,
        None,
        "Record perf baselines for this machine instead of comparing.",
    ),
    (
        STRICT,
        "torch_perf_strict",
        None,
        None,
        "Fail, instead of skip, perf tests without a comparable baseline.",
    ),
    (
        BASELINES,
        "torch_perf_baselines",
        ".torch-perf-baselines.json",
        "PATH",
        "Baseline file, relative to the rootdir.",
    ),
    (
        MAX_TIME,
        "torch_perf_max_time",
        "1.0",
        "SECONDS",
        "Longest time one latency measurement samples (warm-up not included).",
    ),
    (
        BUSY_MAX_TIME,
        "torch_perf_busy_max_time",
        "3.0",
        "SECONDS",
        "On a busy machine, how long one measurement may sample in all to collect"
        " enough undisturbed samples (at least --torch-perf-max-time).",
    ),
    (
        MIN_UNDISTURBED,
        "torch_perf_min_undisturbed",
        "5",
        "N",
        "Undisturbed samples (adding up to 20 ms or more) a measurement needs to be"
        " judged and recorded from them; with fewer it is busy.",
    ),
    (
        FRESH_PROCESSES,
        "torch_perf_fresh_processes",
        "10",
        "N",
        "Before a call under 1 ms fails for being less than 2.5x its baseline, measure"
        " it again in a fresh process (address layout alone can slow a short call up to"
        " 1.8x in one process); at most N per run and xdist worker, 0: never.",
    ),
    (
        BENCHMARK,
        "torch_benchmark",
        None,
        None,
        "Run the @benchmark_suite cases (deselected otherwise, to keep runs fast).",
    ),
    (
        BENCHMARK_JSON,
        "torch_benchmark_json",
        None,
        "PATH",
        "Write every benchmark case's figures and the machine fingerprint as JSON.",
    ),
    (
        BENCHMARK_PLOT,
        "torch_benchmark_plot",
        None,
        "DIR",
        "Draw one PNG per benchmark suite (latency and throughput by batch size).",
    ),
    (
        THREADS,
        "torch_perf_threads",
        "1",
        "N",
        "torch intra-op threads while latency, perf_baseline and benchmark suites"
        " measure (restored after), so timings compare with and without -n.",
    ),
    (
        SLACK_MS,
        "torch_perf_slack_ms",
        "0.001",
        "MS",
        "Absolute slack added to the regression limit, for tiny timings.",
    ),
)


def add_options(parser: pytest.Parser, engines: Mapping[str, str]) -> None:
    """Declare the perf options, each with its ini twin, in one ``--help`` group
    (``engines``: each measurement engine's name and what it measures)."""
    group = parser.getgroup("torch-perf", "torch-perf: latency budgets and perf baselines")
    for flag, ini, default, metavar, text in (_measure_option(engines), *OPTIONS):
        if metavar is None:
            add_flag_with_ini(parser, group, flag, ini=ini, help=text)
        else:
            add_option_with_ini(
                parser, group, flag, ini=ini, default=default, metavar=metavar, help=text
            )


def _measure_option(engines: Mapping[str, str]) -> Option:
    """--torch-perf-measure, whose help names every engine; the first is the default."""
    *others, last = [f"{name} ({summary})" for name, summary in engines.items()]
    return (
        MEASURE,
        "torch_perf_measure",
        next(iter(engines)),
        "MODE",
        f"What perf_baseline and benchmark suites measure and compare: {', '.join(others)}"
        f" or {last}. Latency budgets stay wall-clock.",
    )


def read_settings(config: pytest.Config, engines: Mapping[str, str]) -> PerfSettings:
    """The session's settings from its options (``engines``: each engine's name, the
    values --torch-perf-measure takes, and what it measures); a usage error for a bad
    one."""
    update = bool(option_or_ini(config, "torch_update_perf"))
    path = Path(str(option_or_ini(config, "torch_perf_baselines")))
    instruction_tolerance, slack_instructions = instruction_rule(config)
    threads = int_option(config, "torch_perf_threads", THREADS, minimum=1, example=1)
    settings = PerfSettings(
        measure=measure_mode(config, engines),
        tolerances=(("instruction_tolerance", instruction_tolerance),),
        slack_instructions=slack_instructions,
        update=update,
        strict=bool(option_or_ini(config, "torch_perf_strict")),
        baseline_path=path if path.is_absolute() else config.rootpath / path,
        max_time=float_option(config, "torch_perf_max_time", MAX_TIME),
        slack_ms=float_option(config, "torch_perf_slack_ms", SLACK_MS, zero=True, example="0.001"),
        threads=threads,
        threads_warning=None if xdist_worker(config) else threads_warning(config, threads),
        busy_max_time=float_option(
            config, "torch_perf_busy_max_time", BUSY_MAX_TIME, example="3.0"
        ),
        min_undisturbed=int_option(
            config, "torch_perf_min_undisturbed", MIN_UNDISTURBED, minimum=1, example=5
        ),
        fresh_processes=int_option(
            config, "torch_perf_fresh_processes", FRESH_PROCESSES, minimum=0, example=10
        ),
        benchmark=bool(option_or_ini(config, "torch_benchmark")),
        benchmark_json=path_option(config, "torch_benchmark_json"),
        benchmark_plot=path_option(config, "torch_benchmark_plot", folder=True),
    )
    if settings.benchmark_plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise pytest.UsageError(
            f"{BENCHMARK_PLOT} draws with matplotlib, which is not installed:"
            ' pip install matplotlib (or pip install "pytest-torch[perf]")'
        )
    return settings


def instruction_rule(config: pytest.Config) -> tuple[float, int]:
    """The instruction tolerance and slack; a usage error naming the option for a bad one."""
    tolerance = float_option(
        config,
        "torch_perf_instruction_tolerance",
        INSTRUCTION_TOLERANCE,
        zero=True,
        example=f"{DEFAULT_INSTRUCTION_TOLERANCE:g}",
    )
    slack = int_option(
        config,
        "torch_perf_slack_instructions",
        SLACK_INSTRUCTIONS,
        minimum=0,
        example=DEFAULT_INSTRUCTION_SLACK,
    )
    return tolerance, slack


def measure_mode(config: pytest.Config, engines: Mapping[str, str]) -> str:
    """``--torch-perf-measure``: one of the ``engines``; a usage error naming its source."""
    value = str(option_or_ini(config, "torch_perf_measure")).strip()
    if value not in engines:
        source = option_source(config, "torch_perf_measure", MEASURE)
        default, *others = engines
        choices = "; ".join(f"{MEASURE}={name}: {engines[name]}" for name in others)
        raise pytest.UsageError(
            f"{source}: expected one of {', '.join(engines)}, got {value!r}."
            f" Example: {choices}; {default}, the default: {engines[default]}"
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


def path_option(config: pytest.Config, ini: str, *, folder: bool = False) -> Path | None:
    """A path the run writes (a file, or a ``folder``), relative to where pytest was
    started; None when unset; a usage error when it cannot be written."""
    value = option_or_ini(config, ini)
    if not value:
        return None
    path = Path(str(value))
    path = path if path.is_absolute() else config.invocation_params.dir / path
    problem = unwritable(path, folder=folder)
    if problem is not None:
        source = option_source(config, ini, "--" + ini.replace("_", "-"))
        raise pytest.UsageError(
            f"{source}: cannot write {path}: {problem}. Choose a writable path."
        )
    return path
