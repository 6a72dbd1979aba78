"""A short call's modest regression measured again in a fresh process: the arguments
that process gets, and real runs where it clears or confirms the regression.

The measurements are faked (a conftest replaces ``engines.wall.engine.measure_call``): the
process that asks reads 1.5x its baseline, the fresh one what ``FRESH_MS`` says, so
no verdict depends on this machine's speed or address layout.
"""

from __future__ import annotations

import json

import pytest

from pytest_torch.perf.engines.wall.fresh_process import fresh_args


@pytest.mark.parametrize(
    ("invocation", "positional", "expected"),
    [
        # what to run is replaced by the one test; options and plugins stay
        (["tests", "-p", "torch_perf", "-q"], ["tests"], ["-p", "torch_perf", "-q", "T"]),
        # spreading over workers, selecting other tests, this run's files: left out
        (
            ["-n", "2", "--dist=load", "--lf", "--junitxml", "out.xml", "a.py", "-x"],
            ["a.py"],
            ["-x", "T"],
        ),
        (
            ["-n2", "--basetemp=/tmp/b", "--torch-update-perf", "-k", "fast"],
            [],
            ["-k", "fast", "T"],
        ),
        # a value that looks like a path stays with its option
        (
            ["--rootdir", "tests", "-o", "x=1", "tests"],
            ["tests"],
            ["--rootdir", "tests", "-o", "x=1", "T"],
        ),
        (
            ["-pno:randomly", "--torch-perf-threads=2"],
            [],
            ["-pno:randomly", "--torch-perf-threads=2", "T"],
        ),
    ],
)
def test_a_fresh_process_is_started_like_this_run_for_one_test(invocation, positional, expected):
    assert fresh_args(invocation, positional, "T") == expected


FAKE_MEASUREMENTS = """
import os

import pytest

from pytest_torch.perf.engines.wall import engine
from pytest_torch.perf.engines.wall.contention import Interference
from pytest_torch.perf.engines.wall.timing import LatencyResult

QUIET = Interference("run-queue wait", 0.0, 0, 40, others_cores=0.1, cores=2)


def fake(session, call):
    fresh = os.environ.get("PYTEST_TORCH_PERF_MEASURE_INTO")
    ms = float(os.environ["FRESH_MS"]) if fresh else 0.03
    samples = (ms, ms, ms * 1.01)
    return LatencyResult(samples, 1.0, 3, 10, "cpu", 1, "spread", (), QUIET, samples), {}


@pytest.fixture(autouse=True)
def _fake_measurements(monkeypatch):
    monkeypatch.setattr(engine, "measure_call", fake)
"""

SUITE = """
def test_tiny(perf_baseline):
    perf_baseline(lambda: None)
    perf_baseline(lambda: None, name="second")
"""


@pytest.fixture
def suite(pytester):
    from pytest_torch.core.fingerprint import hardware_fingerprint

    pytester.makeconftest(FAKE_MEASUREMENTS)
    pytester.makepyfile(test_tiny=SUITE)
    entry = {
        "latency_ms": 0.02, "stat": "min", "spread": 0.01, "device": "cpu", "threads": 1,
        "torch": "2.13.0", "python": "3.11.7", "recorded": "2026-12-01T00:00:00+00:00",
        "peak_memory": {},
    }  # fmt: skip
    tests = {"test_tiny.py::test_tiny": entry, "test_tiny.py::test_tiny::second": entry}
    document = {"format": 1, "machines": {hardware_fingerprint().key: tests}}
    (pytester.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    return pytester


def test_a_fresh_process_within_the_limit_clears_the_regression(suite, run, monkeypatch):
    monkeypatch.setenv("FRESH_MS", "0.021")
    result = run("--torch-perf-slack-ms=0", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_tiny.py::test_tiny  * baseline * 21 µs * 20 µs * +5.0 % * ok (in a fresh process)",
            "test_tiny.py::test_tiny::second * 21 µs * ok (in a fresh process)",
        ]
    )


def test_a_fresh_process_over_the_limit_confirms_the_regression(suite, run, monkeypatch):
    monkeypatch.setenv("FRESH_MS", "0.029")
    result = run("--torch-perf-slack-ms=0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*latency (min): 30 µs vs baseline 20 µs = 1.50x*",
            "*confirmed in a fresh process (another address layout): min 29 µs = 1.45x",
        ]
    )


def test_fresh_processes_turned_off_or_used_up_say_so(suite, run, monkeypatch):
    monkeypatch.setenv("FRESH_MS", "0.021")
    result = run("--torch-perf-slack-ms=0", "--torch-perf-fresh-processes=0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*It could not be measured again in a fresh process: turned off"
         " (--torch-perf-fresh-processes=0). If a re-run passes, that was it.*"]
    )  # fmt: skip


def test_a_fresh_process_that_measures_nothing_leaves_the_verdict(suite, run, monkeypatch):
    monkeypatch.setenv("FRESH_MS", "0.021")
    # the fresh process cannot collect the test (its file is gone by then)
    suite.makepyfile(
        test_tiny=SUITE.replace(
            "def test_tiny(perf_baseline):",
            "import pathlib\n\ndef test_tiny(perf_baseline):\n"
            "    pathlib.Path(__file__).rename(pathlib.Path(__file__).with_suffix('.gone'))",
        )
    )
    result = run("--torch-perf-slack-ms=0")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*It could not be measured again in a fresh process: it measured nothing (exit code 4*"]
    )


def test_an_xdist_worker_starts_its_fresh_process_like_the_run(suite, monkeypatch):
    monkeypatch.setenv("FRESH_MS", "0.021")
    result = suite.runpytest_subprocess(
        "-p", "torch_perf", "-p", "xdist", "-n", "2", "--torch-perf-slack-ms=0"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_tiny.py::test_tiny  * ok (in a fresh process)"])
