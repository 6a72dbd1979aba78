"""perf_baseline in real runs: recording, comparing, and every way it can refuse.

Regressions are produced by editing the recorded figures (a baseline far below any
real timing, slack 0), never by racing the clock; whether the machine is busy is
faked (conftest's quiet_machine and busy_machine), never left to chance.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

SUITE = """
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

def test_speed(make_tensor, perf_baseline):
    perf_baseline(model, make_tensor(8, 16), latency_tolerance=10.0)

def test_two_sizes(make_tensor, perf_baseline):
    perf_baseline(model, make_tensor(1, 16), latency_tolerance=10.0, name="b1")
    perf_baseline(model, make_tensor(64, 16), latency_tolerance=10.0, name="b64")
"""
FAST = "--torch-perf-max-time=0.05"
#: a busy measurement samples at most this long looking for undisturbed samples
BUSY_CAP = "--torch-perf-busy-max-time=0.1"


@pytest.fixture
def suite(pytester, quiet_machine):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _baselines(pytester) -> dict:
    return json.loads((pytester.path / ".torch-perf-baselines.json").read_text())


def _edit(pytester, **fields) -> None:
    document = _baselines(pytester)
    for tests in document["machines"].values():
        for entry in tests.values():
            entry.update(fields)
    (pytester.path / ".torch-perf-baselines.json").write_text(json.dumps(document))


def test_record_then_compare(suite, run):
    result = run(FAST, "--torch-update-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*- torch perf: measured on * -*",
            "test_suite.py::test_speed * baseline * min * recorded*",
            "recorded 3 perf baseline(s) for this machine in *.torch-perf-baselines.json",
        ]
    )
    (machine,) = _baselines(suite)["machines"].values()
    assert sorted(machine) == [
        "test_suite.py::test_speed",
        "test_suite.py::test_two_sizes::b1",
        "test_suite.py::test_two_sizes::b64",
    ]
    entry = machine["test_suite.py::test_speed"]
    assert {"latency_ms", "threads", "torch", "python", "recorded", "device"} <= set(entry)
    assert (entry["stat"], entry["threads"]) == ("min", 1)  # --torch-perf-threads' default
    assert entry["core_probe_us"] > 0
    result = run(FAST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["test_suite.py::test_speed * baseline * min * ok"])


def test_parametrized_tests_are_keyed_by_their_full_id(pytester, run, quiet_machine):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_p(perf_baseline, n):
            perf_baseline(lambda: sum(range(n)))
        """
    )
    run(FAST, "--torch-update-perf").assert_outcomes(passed=2)
    (machine,) = _baselines(pytester)["machines"].values()
    assert sorted(machine) == [
        "test_parametrized_tests_are_keyed_by_their_full_id.py::test_p[1]",
        "test_parametrized_tests_are_keyed_by_their_full_id.py::test_p[2]",
    ]


def test_regression_fails_after_confirmation_with_the_rerecord_command(suite, run):
    run(FAST, "--torch-update-perf").assert_outcomes(passed=2)
    _edit(suite, latency_ms=1e-9)
    result = run(FAST, "--torch-perf-slack-ms=0", "-k", "test_speed")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            ">       perf_baseline(model, make_tensor(8, 16), latency_tolerance=10.0)",
            "E       pytest_torch.perf.outcome.PerfRegressionError: performance regression in"
            " test_suite.py::test_speed:",
            "E         latency (min): * vs baseline 1e-06 µs = *x (+*%); limit * = baseline x"
            " (1 + tolerance 10) + slack 0 µs",
            "E         now: median *",
            "E         machine: not busy (* samples undisturbed)",
            "E         baseline: recorded * with torch *, * thread(s), on cpu: *",
            "E         note: confirmed by a second measurement (first: *)",
            "E         If the slowdown is intended *, re-record with: pytest --torch-update-perf"
            " test_suite.py::test_speed",
        ]
    )
    result.stdout.fnmatch_lines(["test_suite.py::test_speed * REGRESSION"])
    assert "plugin.py" not in result.stdout.str()


def test_missing_baseline_skips_or_fails_when_strict(suite, run):
    result = run(FAST, "-rs", "-k", "test_speed")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] test_suite.py:*: no perf baseline for test_suite.py::test_speed on this"
            " machine (cpu: *). Record one with: pytest --torch-update-perf*"
        ]
    )
    run(FAST, "--torch-perf-strict", "-k", "test_speed").assert_outcomes(failed=1)
    suite.makeini("[pytest]\ntorch_perf_strict = true\n")
    run(FAST, "-k", "test_speed").assert_outcomes(failed=1)


def test_other_thread_count_is_not_judged(suite, run):
    run(FAST, "--torch-update-perf").assert_outcomes(passed=2)
    _edit(suite, threads=999)
    result = run(FAST, "-rs", "-k", "test_speed")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*recorded with 999 thread(s), this run measures with 1; *not comparable*"
            " (--torch-perf-threads=999)*"
        ]
    )
    run(FAST, "--torch-perf-strict", "-k", "test_speed").assert_outcomes(failed=1)


def test_corrupt_file_stops_the_run_once_before_any_test_and_is_left_alone(suite, run):
    path = suite.path / ".torch-perf-baselines.json"
    path.write_text("{oops")
    for args in ([], ["--torch-update-perf"]):
        result = run(FAST, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: the perf baseline file {path} is not valid JSON*"])
        assert result.stderr.str().count("not valid JSON") == 1
        assert "collected" not in result.stdout.str()
        assert path.read_text() == "{oops"
    # the command it gives works
    (command,) = re.findall(r"re-record: (mv .*)$", result.stderr.str(), re.M)
    mv, update = command.split(" && ")
    subprocess.run(mv, shell=True, check=True, cwd=suite.path)
    assert update == "pytest --torch-update-perf"
    run(FAST, update.split()[1]).assert_outcomes(passed=2)
    assert (suite.path / ".torch-perf-baselines.json.old").read_text() == "{oops"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"format": 99, "machines": {}}', "has format 99*A newer pytest-torch-perf wrote it"),
        (
            '{"format": 1, "machines": {}, "instructions": {"k": {"t::a": {"instructions": -4}}}}',
            "*instructions 't::a': entry is malformed (instructions must be above 0, got -4)*",
        ),
    ],
)
def test_counting_runs_say_so_before_valgrind_starts_with_a_command_that_works(
    suite, run, content, problem
):
    path = suite.path / ".torch-perf-baselines.json"
    path.write_text(content)
    result = run("--torch-perf-measure=instructions")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: *{path}*{problem}*re-record: mv {path} {path}.old && pytest"
            " --torch-update-perf --torch-perf-measure=instructions"
        ]
    )
    assert path.read_text() == content


def test_baseline_path_option_and_ini_twin(suite, run):
    run(FAST, "--torch-update-perf", "--torch-perf-baselines=perf/custom.json").assert_outcomes(
        passed=2
    )
    assert (suite.path / "perf" / "custom.json").exists()
    suite.makeini("[pytest]\ntorch_perf_baselines = perf/custom.json\n")
    run(FAST, "-k", "test_speed").assert_outcomes(passed=1)
    suite.makeini("[pytest]\ntorch_update_perf = true\ntorch_perf_baselines = other.json\n")
    run(FAST).assert_outcomes(passed=2)
    assert (suite.path / "other.json").exists()


def test_the_same_name_twice_is_an_error(pytester, run, quiet_machine):
    pytester.makepyfile(
        """
        def test_twice(perf_baseline):
            perf_baseline(lambda: None, name="a")
            perf_baseline(lambda: None, name="a")
        """
    )
    result = run(FAST, "--torch-update-perf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*perf_baseline was called twice for *::test_twice::a; give each*"]
    )


def test_recorded_under_xdist_compared_serially_and_back(suite, run):
    # the workers hand their recordings to the controller, which writes the file once
    result = run(FAST, "--torch-update-perf", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["recorded 3 perf baseline(s) for this machine in *"])
    (machine,) = _baselines(suite)["machines"].values()
    assert len(machine) == 3 and {entry["threads"] for entry in machine.values()} == {1}
    assert not list(suite.path.glob("*.tmp"))
    result = run(FAST, "-rs")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["test_suite.py::test_two_sizes::b64 * baseline * min * ok"])
    # and a serial recording is compared under -n: the thread count is the same
    run(FAST, "--torch-update-perf").assert_outcomes(passed=2)
    result = run(FAST, "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["test_suite.py::test_two_sizes::b64 * baseline * ok"])


def test_perf_alone_with_autoload_off_brings_core(suite, run, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = run(FAST, "--torch-update-perf")
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("value", ["-1", "'x'", "True"])
def test_bad_tolerance_is_explained(pytester, run, value):
    pytester.makepyfile(
        f"""
        def test_x(perf_baseline):
            perf_baseline(lambda: None, latency_tolerance={value})
        """
    )
    result = run(FAST, "--torch-update-perf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*perf_baseline: latency_tolerance must be a finite number >= 0, got *"]
    )


def test_cpu_baseline_records_and_compares_peak_memory(pytester, run, quiet_machine):
    pytester.makepyfile(
        """
        import torch

        def test_alloc(perf_baseline):
            x = torch.randn(1024, 1024)
            perf_baseline(lambda t: (t @ t.T).sum(), x, latency_tolerance=10.0)
        """
    )
    run(FAST, "--torch-update-perf").assert_outcomes(passed=1)
    (machine,) = _baselines(pytester)["machines"].values()
    (entry,) = machine.values()
    assert entry["device"] == "cpu"
    # what the call added: the 4 MiB product, not the 4 MiB input that was already there
    assert 4 * 2**20 <= entry["peak_memory"]["cpu"] < 5 * 2**20
    run(FAST).assert_outcomes(passed=1)
    _edit(pytester, peak_memory={"cpu": 1024})
    result = run(FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * peak memory on cpu: * MiB vs baseline 0.0 MiB*"])


@pytest.mark.accelerator
def test_accelerator_baseline_records_and_compares_peak_memory(
    pytester, run, accelerator, quiet_machine
):
    pytester.makepyfile(
        f"""
        import torch

        def test_alloc(perf_baseline):
            x = torch.full((1024, 1024), 0.5, device="{accelerator}")
            perf_baseline(lambda t: (t @ t).sum(), x, latency_tolerance=10.0)
        """
    )
    run(FAST, "--torch-update-perf").assert_outcomes(passed=1)
    (machine,) = _baselines(pytester)["machines"].values()
    (entry,) = machine.values()
    assert entry["device"].startswith(accelerator)
    (peak,) = entry["peak_memory"].values()
    assert peak >= 4 * 2**20  # the 1024x1024 float32 product
    run(FAST).assert_outcomes(passed=1)
    _edit(pytester, peak_memory={entry["device"]: 1024})
    result = run(FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"E * peak memory on {accelerator}:*: * MiB vs baseline 0.0 MiB*"])


def _scale(pytester, factor: float) -> None:
    """Divide every recorded latency by ``factor``: the code is ``factor`` times slower."""
    document = _baselines(pytester)
    for tests in document["machines"].values():
        for entry in tests.values():
            entry["latency_ms"] /= factor
    (pytester.path / ".torch-perf-baselines.json").write_text(json.dumps(document))


def test_a_busy_machine_judges_in_proportion_and_never_hides_a_pass(suite, run, machine):
    run(FAST, "--torch-update-perf", "-k", "test_speed").assert_outcomes(passed=1)
    machine("busy")  # recorded on a quiet machine, compared on one where it waits 90 %
    # within the limit still passes, and says so
    result = run(FAST, BUSY_CAP, "-k", "test_speed")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_suite.py::test_speed * baseline * min * ok (machine busy)"])
    # 35x the baseline against a limit of 11x: the waiting explains it, not judged
    _scale(suite, 35)
    result = run(FAST, BUSY_CAP, "--torch-perf-slack-ms=0", "-rs", "-k", "test_speed")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_speed * baseline * min * not judged: machine busy",
            "SKIPPED * test_suite.py::test_speed: not judged: machine busy. min * vs baseline"
            " * = *x is over the limit * but other processes slowed the measurement"
            " down: this process waited for a CPU * % of the time (run-queue wait); 0 of *"
            " samples undisturbed*; after taking out the * % of the time this process waited,"
            " the code can have run at best at min *: within the limit of *",
        ]
    )
    result = run(
        FAST, BUSY_CAP, "--torch-perf-slack-ms=0", "--torch-perf-strict", "-k", "test_speed"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * pytest_torch.perf.outcome.PerfNotJudgedError: test_suite.py::test_speed: not"
            " judged: machine busy.*",
            "*This test is failed (--torch-perf-strict). Run perf tests*",
        ]
    )
    # a million times over: more than any waiting explains, a regression on any load
    _scale(suite, 1e6 / 35)
    result = run(FAST, BUSY_CAP, "--torch-perf-slack-ms=0", "-k", "test_speed")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E *PerfRegressionError: performance regression in test_suite.py::test_speed:",
            "E * machine: busy (this process waited for a CPU * % of the time *); over the"
            " limit even so: after taking out the * % of the time this process waited, the"
            " code can have run at best at min *: still *x the limit of *",
            "test_suite.py::test_speed * baseline * min * REGRESSION (machine busy)",
        ]
    )


def test_recording_on_a_busy_machine_records_nothing(pytester, run, busy_machine):
    pytester.makepyfile(test_suite=SUITE)
    result = run(FAST, BUSY_CAP, "--torch-update-perf", "-rs", "-k", "test_speed")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_speed * baseline * min * not recorded: machine busy",
            "SKIPPED * test_suite.py::test_speed: not recorded: machine busy. A baseline is"
            " recorded from undisturbed samples (at least 5, adding up to 20 ms), but other"
            " processes disturbed all 3 measurements too much: *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "torch: --torch-update-perf recorded no baseline: 1 measurement(s) ran, and none"
            " could be recorded (not recorded: machine busy; *). Re-run --torch-update-perf"
            " on a quieter machine",
        ]
    )
    assert "no test that ran called" not in result.stdout.str()
    assert not (pytester.path / ".torch-perf-baselines.json").exists()
    result = run(FAST, BUSY_CAP, "--torch-update-perf", "--torch-perf-strict", "-k", "test_speed")
    result.assert_outcomes(failed=1)


@pytest.mark.parametrize("where", ["option", "ini"])
def test_measurements_use_the_perf_thread_count_and_restore_torchs(pytester, run, where):
    pytester.makepyfile(
        """
        import torch

        def test_threads(latency, perf_baseline):
            before = torch.get_num_threads()
            seen = []
            result = latency(lambda: seen.append(torch.get_num_threads()))
            assert set(seen) == {2} and result.threads == 2
            assert torch.get_num_threads() == before
        """
    )
    if where == "ini":
        pytester.makeini("[pytest]\ntorch_perf_threads = 2\n")
        args = [FAST]
    else:
        args = [FAST, "--torch-perf-threads=2"]
    result = run(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["torch perf: measurements on 2 intra-op threads (--torch-perf-threads)"]
    )


def test_a_baseline_from_a_faster_host_explains_only_its_own_share(pytester, run, quiet_machine):
    """A baseline file recorded on a host whose core ran the core probe 3x faster
    (same machine key): this slower host is never called busy; an excess the slower core
    can explain is not judged, a larger one fails."""
    # a call that takes 0.5 ms of wall time whatever the machine's speed
    pytester.makepyfile(
        test_suite="""
        import time

        def spin():
            end = time.perf_counter() + 5e-4
            while time.perf_counter() < end:
                pass

        def test_speed(perf_baseline):
            perf_baseline(spin, latency_tolerance=0.2)
        """
    )
    run(FAST, "--torch-update-perf").assert_outcomes(passed=1)
    (machine,) = _baselines(pytester)["machines"].values()
    assert machine["test_suite.py::test_speed"]["core_probe_us"] == pytest.approx(10.0)
    _edit(pytester, core_probe_us=10.0 / 3)  # the faked core probe runs 10 µs here
    result = run(FAST, "--torch-perf-slack-ms=0")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_suite.py::test_speed * baseline * min * ok"])
    assert "busy" not in result.stdout.str()
    _scale(pytester, 2)  # twice the baseline, over its limit of 1.2x: a 3x slower core explains it
    result = run(FAST, "--torch-perf-slack-ms=0", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * not judged: slower host. min * = *x is over the limit *, but this"
            " process's core ran a fixed hash 3.00x slower than the one that recorded the"
            " baseline (10 µs vs 3.33 µs at best)*",
        ]
    )
    _scale(pytester, 1000)  # far more than any core explains
    result = run(FAST, "--torch-perf-slack-ms=0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * machine: slower than at recording (*); over the limit even so: after taking"
            " out a core 3.00x slower than the one the baseline was recorded on, the code can"
            " have run at best at min *: still *x the limit of *",
            "test_suite.py::test_speed * baseline * min * REGRESSION (slower host)",
        ]
    )
