"""The perf plugin's command-line options and their ini twins (read by ``settings``)."""

from __future__ import annotations

import pytest

from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini
from pytest_torch.perf.rule import DEFAULT_INSTRUCTION_SLACK, DEFAULT_INSTRUCTION_TOLERANCE

#: in ``--help`` order: flag, ini name, default, metavar (None: an on/off flag), help
OPTIONS: tuple[tuple[str, str, str | None, str | None, str], ...] = (
    (
        "--torch-perf-measure",
        "torch_perf_measure",
        "wall",
        "MODE",
        "What perf_baseline and benchmark suites measure and compare: wall (latency on"
        " this machine's clock) or instructions (instructions counted under Valgrind, which"
        " no machine load moves; the plugin starts Valgrind itself). Latency budgets stay"
        " wall-clock.",
    ),
    (
        "--torch-perf-instruction-tolerance",
        "torch_perf_instruction_tolerance",
        f"{DEFAULT_INSTRUCTION_TOLERANCE:g}",
        "FRACTION",
        "With --torch-perf-measure=instructions: how many more instructions than its"
        " baseline a call may count before it is a regression (0.01 allows 1 percent more).",
    ),
    (
        "--torch-perf-slack-instructions",
        "torch_perf_slack_instructions",
        str(DEFAULT_INSTRUCTION_SLACK),
        "N",
        "With --torch-perf-measure=instructions: instructions added to the regression"
        " limit, for tiny calls.",
    ),
    (
        "--torch-update-perf",
        "torch_update_perf",
        None,
        None,
        "Record perf baselines for this machine instead of comparing.",
    ),
    (
        "--torch-perf-strict",
        "torch_perf_strict",
        None,
        None,
        "Fail, instead of skip, perf tests without a comparable baseline.",
    ),
    (
        "--torch-perf-baselines",
        "torch_perf_baselines",
        ".torch-perf-baselines.json",
        "PATH",
        "Baseline file, relative to the rootdir.",
    ),
    (
        "--torch-perf-max-time",
        "torch_perf_max_time",
        "1.0",
        "SECONDS",
        "Longest time one latency measurement samples (warm-up not included).",
    ),
    (
        "--torch-perf-busy-max-time",
        "torch_perf_busy_max_time",
        "3.0",
        "SECONDS",
        "On a busy machine, how long one measurement may sample in all to collect"
        " enough undisturbed samples (at least --torch-perf-max-time).",
    ),
    (
        "--torch-perf-min-undisturbed",
        "torch_perf_min_undisturbed",
        "5",
        "N",
        "Undisturbed samples (adding up to 20 ms or more) a measurement needs to be"
        " judged and recorded from them; with fewer it is busy.",
    ),
    (
        "--torch-perf-fresh-processes",
        "torch_perf_fresh_processes",
        "10",
        "N",
        "Before a call under 1 ms fails for being less than 2.5x its baseline, measure"
        " it again in a fresh process (address layout alone can slow a short call up to"
        " 1.8x in one process); at most N per run and xdist worker, 0: never.",
    ),
    (
        "--torch-benchmark",
        "torch_benchmark",
        None,
        None,
        "Run the @benchmark_suite cases (deselected otherwise, to keep runs fast).",
    ),
    (
        "--torch-benchmark-json",
        "torch_benchmark_json",
        None,
        "PATH",
        "Write every benchmark case's figures and the machine fingerprint as JSON.",
    ),
    (
        "--torch-benchmark-plot",
        "torch_benchmark_plot",
        None,
        "DIR",
        "Draw one PNG per benchmark suite (latency and throughput by batch size).",
    ),
    (
        "--torch-perf-threads",
        "torch_perf_threads",
        "1",
        "N",
        "torch intra-op threads while latency, perf_baseline and benchmark suites"
        " measure (restored after), so timings compare with and without -n.",
    ),
    (
        "--torch-perf-slack-ms",
        "torch_perf_slack_ms",
        "0.001",
        "MS",
        "Absolute slack added to the regression limit, for tiny timings.",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    """Declare the perf options, each with its ini twin, in one ``--help`` group."""
    group = parser.getgroup("torch-perf", "torch-perf: latency budgets and perf baselines")
    for flag, ini, default, metavar, text in OPTIONS:
        if metavar is None:
            add_flag_with_ini(parser, group, flag, ini=ini, help=text)
        else:
            add_option_with_ini(
                parser, group, flag, ini=ini, default=default, metavar=metavar, help=text
            )
