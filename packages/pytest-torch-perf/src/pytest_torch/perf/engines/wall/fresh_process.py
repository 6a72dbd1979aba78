"""Measuring a test's calls again in a fresh process, before a short call's modest
regression fails.

A short call is mostly the interpreter's and torch's dispatch, which a process's
address layout alone can slow up to 1.8x for the process's whole life
(``engines.wall.settling.SHORT_CALL_MS``): no figure inside the process shows it, and
measuring again in the same process draws the same layout. Another process draws
another one. So the test runs once more in
``python -m pytest <its file>::<its name>``, started like this run (the same options,
plugins, ini file and working folder, less what would select other tests, distribute
them or write this run's files); there its perf checks only measure, write what they
measured into a file, and judge nothing.

The child knows it is one by :data:`ENV` (the file to write). Each test runs in at most
one fresh process per run, and a run starts at most ``--torch-perf-fresh-processes`` of
them (per xdist worker).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_torch.core.ids import plain_nodeid
from pytest_torch.perf.options import (
    BASELINES,
    BENCHMARK,
    BENCHMARK_JSON,
    BENCHMARK_PLOT,
    FRESH_PROCESSES,
    UPDATE,
)

if TYPE_CHECKING:
    import pytest

    from pytest_torch.perf.engines.wall.settling import Measured

#: set in the fresh process: the file its perf checks write their measurements into
ENV = "PYTEST_TORCH_PERF_MEASURE_INTO"
#: the longest a fresh run may take (set-up and collection included)
TIMEOUT_S = 120.0
#: where an xdist worker finds the controller's command line (see ``plugin``)
WORKER_ARGS = "pytest_torch_perf_args"

#: options whose value is the next argument unless written ``--opt=value`` (or ``-nVALUE``)
_WITH_VALUE = {
    "-n", "--numprocesses", "--maxprocesses", "--dist", "--tx", "--rsyncdir",
    "--junitxml", "--junit-xml", "--junitprefix", "--junit-prefix", "--html", "--report-log",
    "--resultlog", "--result-log", "--json-report-file", "--basetemp", "--maxfail",
    "--cov", "--cov-report", "--cov-config", "--cov-context", "--cov-fail-under",
    BASELINES, BENCHMARK_JSON, BENCHMARK_PLOT,
    "--torch-failure-artifacts", "-p", "-c", "--config-file", "--rootdir", "--confcutdir",
    "-o", "--override-ini", "-k", "-m", "-W", "--pythonwarnings", "--deselect", "--ignore",
    "--ignore-glob", "--import-mode", "--tb", "-r", "--capture", "--log-level",
    "--log-file", "--log-cli-level", "--durations", "--timeout", "--torch-device",
}  # fmt: skip
#: what the fresh run leaves out: selecting or ordering other tests, spreading them over
#: workers, stopping early, writing this run's files (a baseline, reports, a temporary
#: folder pytest would empty), and interactive debugging
_LEFT_OUT = {
    "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--sw",
    "--stepwise", "--sw-skip", "--stepwise-skip", "--looponfail", "-f", "--pdb", "--trace",
    UPDATE, "--cov-append", "--no-cov", BENCHMARK, "--lfnf",
    "--last-failed-no-failures", "--cache-clear", "--cache-show",
    "-n", "--numprocesses", "--maxprocesses", "--dist", "--tx", "--rsyncdir", "--junitxml",
    "--junit-xml", "--junitprefix", "--junit-prefix", "--html", "--report-log", "--resultlog",
    "--result-log", "--json-report-file", "--basetemp", "--cov", "--cov-report",
    "--cov-config", "--cov-context", "--cov-fail-under", BENCHMARK_JSON,
    BENCHMARK_PLOT, "--torch-failure-artifacts", "--log-file",
}  # fmt: skip


def measuring_into() -> Path | None:
    """In a fresh process: the file its checks write into (None in a normal run)."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


def write_measured(path: Path, name: str, measured: Measured) -> None:
    """In a fresh process: keep one check's measurement (``name``: its perf_baseline
    name, "" for none) beside those of the test's other checks."""
    taken: dict[str, Any] = {}
    if path.exists():
        with path.open("rb") as handle:
            taken = pickle.load(handle)
    taken[name] = measured
    partial = path.with_suffix(".partial")
    with partial.open("wb") as handle:
        pickle.dump(taken, handle)
    os.replace(partial, path)


def fresh_args(invocation: list[str], positional: list[str], test: str) -> list[str]:
    """The fresh run's arguments: this run's ``invocation`` without its ``positional``
    arguments (what to run; each removed once, the last of equal ones) and without
    :data:`_LEFT_OUT`, then ``test``."""
    kept: list[tuple[str, bool]] = []  # (argument, whether it may be a positional one)
    args = iter(invocation)
    for arg in args:
        name = arg.split("=", 1)[0]
        attached = arg[:2] in ("-n", "-p") and len(arg) > 2 and not arg.startswith("--")
        value = [next(args, "")] if name in _WITH_VALUE and "=" not in arg and not attached else []
        if name in _LEFT_OUT or (attached and arg[:2] == "-n"):
            continue
        kept += [(arg, not arg.startswith("-")), *((v, False) for v in value)]
    for target in positional:
        for index in reversed(range(len(kept))):
            if kept[index] == (target, True):
                del kept[index]
                break
    return [*(arg for arg, _ in kept), test]


def test_argument(item: pytest.Item) -> str:
    """The test as an argument that names it from any folder: its file's absolute path
    and the rest of its id."""
    _, _, rest = plain_nodeid(item).partition("::")
    return f"{item.path}::{rest}" if rest else str(item.path)


def invocation_of(config: pytest.Config) -> tuple[list[str], list[str]]:
    """This run's command-line arguments and its positional ones; in an xdist worker,
    the controller's (which the plugin hands over in ``workerinput``)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and WORKER_ARGS in workerinput:
        invocation, positional = workerinput[WORKER_ARGS]
        return list(invocation), list(positional)
    source = getattr(config, "args_source", None)  # pytest 7.3+: args, or testpaths
    given = source is None or source.name == "ARGS"
    return list(config.invocation_params.args), [str(arg) for arg in config.args] if given else []


class FreshProcesses:
    """The fresh runs of one session: at most ``limit``, one per test."""

    def __init__(self, config: pytest.Config, limit: int) -> None:
        self.config = config
        self.limit = limit
        self.started = 0
        self._runs: dict[str, dict[str, Measured] | str] = {}

    def measure(self, item: pytest.Item, name: str) -> Measured | str:
        """The measurement of ``item``'s check ``name`` in a fresh process, or why
        there is none."""
        if item.nodeid not in self._runs:
            if self.started >= self.limit:
                return (
                    f"this run has started its {self.limit} fresh process(es) already"
                    f" ({FRESH_PROCESSES})"
                    if self.limit
                    else f"turned off ({FRESH_PROCESSES}=0)"
                )
            self.started += 1
            self._runs[item.nodeid] = self._run(item)
        run = self._runs[item.nodeid]
        if isinstance(run, str):
            return run
        if name not in run:
            return f"the fresh run measured no check named {name or '(no name)'!r}"
        return run[name]

    def _run(self, item: pytest.Item) -> dict[str, Measured] | str:
        invocation, positional = invocation_of(self.config)
        args = fresh_args(invocation, positional, test_argument(item))
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("PYTEST_XDIST_") and key != "PYTEST_CURRENT_TEST"
        }
        with tempfile.TemporaryDirectory(prefix="pytest-torch-fresh-") as folder:
            out = Path(folder) / "measured.pickle"
            env[ENV] = str(out)
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                    cwd=self.config.invocation_params.dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    timeout=TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return f"the fresh run took more than {TIMEOUT_S:.0f} s and was stopped"
            except OSError as exc:
                return f"could not start it: {exc}"
            if not out.exists():
                return _why_nothing(done.returncode, done.stdout)
            with out.open("rb") as handle:
                taken: dict[str, Measured] = pickle.load(handle)
            return taken


def _why_nothing(code: int, output: bytes) -> str:
    lines = [line.strip() for line in output.decode(errors="replace").splitlines()]
    last = next((line for line in reversed(lines) if line and not line.startswith("=")), "")
    return f"it measured nothing (exit code {code}{f': {last!r}' if last else ''})"
