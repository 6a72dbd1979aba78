"""The perf plugin's command-line options and their ini twins (read by ``settings``)."""

from __future__ import annotations

import pytest

from pytest_torch.core.options import add_flag_with_ini, add_option_with_ini


def add_options(parser: pytest.Parser) -> None:
    """Declare the perf options, each with its ini twin, in one ``--help`` group."""
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
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-busy-max-time",
        ini="torch_perf_busy_max_time",
        default="3.0",
        metavar="SECONDS",
        help="On a busy machine, how long one measurement may sample in all to collect"
        " enough undisturbed samples (at least --torch-perf-max-time).",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-perf-min-undisturbed",
        ini="torch_perf_min_undisturbed",
        default="5",
        metavar="N",
        help="Undisturbed samples (adding up to 20 ms or more) a measurement needs to be"
        " judged and recorded from them; with fewer it is busy.",
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
