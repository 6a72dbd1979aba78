"""Latency budgets in real runs (budgets far from the real timings: no clock races;
whether the machine is busy is faked by conftest's quiet_machine and busy_machine)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

MODEL = """
import pytest
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""


def test_within_budget_passes_and_returns_the_distribution(pytester, run, quiet_machine):
    pytester.makepyfile(
        MODEL
        + """
@pytest.mark.torch_max_latency(ms=10_000)
def test_fast(make_tensor, latency):
    result = latency(model, make_tensor(8, 16))
    assert 0 < result.min <= result.median <= result.p90 <= result.p99
    assert result.runs >= 3 and result.warmup_calls >= 1 and result.first_call_ms > 0
    assert result.device == "cpu" and result.threads == 1  # --torch-perf-threads

def test_without_marker_just_measures(latency):
    assert latency(lambda: sum(range(100))).median > 0
"""
    )
    result = run("--torch-perf-max-time=0.05")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*- torch perf: measured on * -*",
            "test * check * statistic * measured * reference * vs reference * verdict",
            "*::test_fast * budget * median * 10 s * % of budget * within budget",
        ]
    )


def test_over_budget_fails_at_the_users_line_with_the_distribution(pytester, run, quiet_machine):
    pytester.makepyfile(
        MODEL
        + """
@pytest.mark.torch_max_latency(1e-6, stat="p90")
def test_slow(make_tensor, latency):
    x = make_tensor(8, 16)
    latency(model, x)
"""
    )
    result = run("--torch-perf-max-time=0.05")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            ">       latency(model, x)",
            "E       pytest_torch.perf.outcome.PerfRegressionError: latency budget exceeded:"
            " p90 * > budget 0.001 µs (+*",
            "E         distribution: median *, p10 *, p90 *, min *, IQR * samples x * after *"
            " warm-up calls (stopped by *); first call * (excluded); cpu, 1 thread",
            "E         machine: not busy (* samples undisturbed)",
            "E         what to try: *",
            "E         note: confirmed by a second measurement (first: *)",
        ]
    )
    assert "plugin.py" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*::test_slow * budget * p90 * OVER BUDGET"])


def test_marker_without_a_latency_call_fails(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_max_latency(ms=5)
        def test_forgot(latency):
            pass
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*test_forgot is marked @pytest.mark.torch_max_latency but never called latency(...)*"]
    )
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(
    ("marker", "signature", "expected"),
    [
        ("torch_max_latency(ms=5)", "()", "needs the latency fixture"),
        (
            "torch_max_latency()",
            "(latency)",
            "needs a positive, finite budget in milliseconds, got None",
        ),
        ("torch_max_latency(ms=-1)", "(latency)", "needs a positive, finite budget"),
        (
            "torch_max_latency(ms=float('inf'))",
            "(latency)",
            "finite budget in milliseconds, got inf",
        ),
        ("torch_max_latency(5, stat='p95')", "(latency)", "stat must be one of"),
        ("torch_max_latency(5, budget=1)", "(latency)", "unknown keyword(s) budget"),
    ],
)
def test_bad_markers_are_collection_errors_naming_the_test(
    pytester, run, marker, signature, expected
):
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_x{signature}:
            pass
        """
    )
    result = run()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*.py::test_x: @pytest.mark.torch_max_latency *{expected}*"])
    assert "Traceback" not in result.stdout.str()


def test_over_budget_on_a_busy_machine_is_judged_in_proportion(pytester, run, machine):
    pytester.makepyfile(
        MODEL
        + """
import time


def spin():  # 0.5 ms of wall time however fast the machine: no figure of this machine
    end = time.perf_counter() + 5e-4
    while time.perf_counter() < end:
        pass


@pytest.mark.torch_max_latency(1e-6)
def test_far_over(make_tensor, latency):
    latency(model, make_tensor(8, 16))

@pytest.mark.torch_max_latency(10_000)
def test_fast(make_tensor, latency):
    latency(model, make_tensor(8, 16))

# half the time the call takes: the 90 % waited on the busy machine explains it
@pytest.mark.torch_max_latency(0.25)
def test_near(latency):
    latency(spin)
"""
    )
    machine("busy")
    args = ("--torch-perf-max-time=0.05", "--torch-perf-busy-max-time=0.1", "-rs")
    result = run(*args)
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*::test_far_over * budget * median * OVER BUDGET (machine busy)",
            "*::test_fast * budget * median * within budget (machine busy)",
            "*::test_near * budget * median * not judged: machine busy",
            "SKIPPED * *::test_near: not judged: machine busy. The median latency * is over the"
            " budget of *, but other processes slowed the measurement down: this process"
            " waited for a CPU * % of the time*; after taking out the * % of the time this"
            " process waited, the code can have run at best at median *: within the limit*",
        ]
    )
    assert "over the limit even so: after taking out the " in result.stdout.str()
    result = run(*args, "--torch-perf-strict", "-k", "near")
    result.assert_outcomes(failed=1, deselected=2)
    result.stdout.fnmatch_lines(["E *PerfNotJudgedError: *::test_near: not judged: machine busy.*"])


@pytest.mark.parametrize(
    "flag", ["--torch-perf-max-time=0", "--torch-perf-max-time=abc", "--torch-perf-slack-ms=-1"]
)
def test_bad_options_are_usage_errors(pytester, run, flag):
    pytester.makepyfile("def test_x(): pass")
    result = run(flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {flag.split('=')[0]}: expected a*number*, got*"])


def test_max_time_ini_twin(pytester, run):
    pytester.makeini("[pytest]\ntorch_perf_max_time = abc\n")
    pytester.makepyfile("def test_x(): pass")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: torch_perf_max_time (in tox.ini): expected a positive, finite number,"
            " got 'abc'. Example: --torch-perf-max-time=1.0"
        ]
    )
    assert run("--torch-perf-max-time=0.05").ret == 0  # the command line wins


def test_figures_go_to_junit_xml(pytester, run, quiet_machine):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_max_latency(ms=10_000)
        def test_x(latency):
            latency(lambda: None)
        """
    )
    run("--torch-perf-max-time=0.05", "--junitxml=report.xml").assert_outcomes(passed=1)
    xml = (pytester.path / "report.xml").read_text()
    assert 'name="torch_perf.test_figures_go_to_junit_xml.py::test_x.measured_ms"' in xml
    assert (
        'name="torch_perf.test_figures_go_to_junit_xml.py::test_x.verdict" value="within budget"'
        in xml
    )


def test_help_and_markers(pytester, run):
    run("--help").stdout.fnmatch_lines(
        [
            "torch-perf: latency budgets and perf baselines:",
            "*--torch-update-perf*",
            "*--torch-perf-strict*",
            "*--torch-perf-baselines=PATH*",
            "*--torch-perf-max-time=SECONDS*",
            "*--torch-perf-threads=N*",
            "*--torch-perf-slack-ms=MS*",
        ]
    )
    run("--markers").stdout.fnmatch_lines(["@pytest.mark.torch_max_latency(ms, stat='median'):*"])


@pytest.mark.parametrize(
    ("args", "ini", "source"),
    [
        (["--torch-perf-threads=0"], None, "--torch-perf-threads"),
        (["--torch-perf-threads=two"], None, "--torch-perf-threads"),
        (["--torch-perf-threads=1.5"], None, "--torch-perf-threads"),
        ([], "torch_perf_threads = -2", "torch_perf_threads (in tox.ini)"),
    ],
)
def test_a_bad_perf_thread_count_is_a_usage_error_naming_its_source(
    pytester, run, args, ini, source
):
    pytester.makepyfile("def test_x(): pass")
    if ini is not None:
        pytester.makefile(".ini", tox=f"[pytest]\n{ini}\n")
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: {source}: expected a whole number >= 1, got *. Example: --torch-perf-threads=1"]
    )


def test_more_perf_threads_than_cores_is_a_warning_in_the_header(pytester, run):
    from pytest_torch.core.cpus import available_cores

    cores = available_cores()
    pytester.makepyfile("def test_x(): pass")
    result = run(f"--torch-perf-threads={cores + 1}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"torch perf: measurements on {cores + 1} intra-op threads (--torch-perf-threads)",
            f"  WARNING: --torch-perf-threads={cores + 1}: {cores + 1} threads on {cores}"
            f" available core* while measuring; measurements whose threads wait for a CPU"
            f" are not judged (machine busy). *",
        ]
    )


def test_the_per_test_hooks_are_registered_only_when_a_test_needs_them(pytester, run):
    check = "def test_{0}(request):\n    assert {1}request.config.pluginmanager.has_plugin('torch_perf_runner')\n"
    pytester.makepyfile(test_plain=check.format("plain", "not "))
    run().assert_outcomes(passed=1)
    pytester.makepyfile(
        test_timed="import pytest\n\n@pytest.mark.torch_max_latency(ms=10_000)\n"
        "def test_timed(latency):\n    latency(lambda: None)\n",
        test_plain=check.format("plain", ""),
    )
    run("--torch-perf-max-time=0.05").assert_outcomes(passed=2)


def test_a_budget_and_a_baseline_in_one_test_are_two_rows(pytester, run, quiet_machine):
    """latency() under a latency budget and perf_baseline() without a name, in either
    order: the baseline keeps the test id (its key in the file), the budget's row is
    ``<test>::latency-budget``; before, the second call failed the test as "called
    twice"."""
    pytester.makepyfile(
        """
        import pytest
        import torch

        model, x = torch.nn.Linear(8, 8), torch.randn(2, 8)

        @pytest.mark.torch_max_latency(ms=10_000)
        def test_budget_first(latency, perf_baseline):
            latency(model, x)
            latency(model, x)
            perf_baseline(model, x)

        @pytest.mark.torch_max_latency(ms=10_000)
        def test_baseline_first(latency, perf_baseline):
            perf_baseline(model, x)
            latency(model, x)
        """
    )
    result = run("--torch-perf-max-time=0.05", "--torch-update-perf", "--junitxml=report.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*::test_budget_first * baseline * recorded*",
            "*::test_budget_first::latency-budget * budget * within budget",
            "*::test_budget_first::latency-budget#2 * budget * within budget",
            "*::test_baseline_first * baseline * recorded*",
            "*::test_baseline_first::latency-budget * budget * within budget",
        ]
    )
    (machine,) = json.loads((pytester.path / ".torch-perf-baselines.json").read_text())[
        "machines"
    ].values()
    assert sorted(name.split("::")[1] for name in machine) == [
        "test_baseline_first",
        "test_budget_first",
    ]
    xml = ET.parse(pytester.path / "report.xml")
    names = [prop.get("name") for prop in xml.iter("property")]
    assert len(names) == len(set(names))
    assert any(n.endswith("::test_budget_first::latency-budget.verdict") for n in names)
