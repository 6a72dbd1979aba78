"""The demo: the example suite with every report the plugins produce.

``python scripts/demo.py [--examples DIR] [PYTEST ARGS...]`` runs, in the examples
folder (``examples/`` by default), with this Python:

1. the perf baselines of this machine recorded (baselines are per machine);
2. the example suite, every feature, each end-of-run report once (PYTEST ARGS go here);
3. a part of it on two workers in deterministic mode (each worker's share of the cores
   and the deterministic settings are in the header);
4. the benchmark suites, which are opt-in: their tables, JSON and plots;
5. instruction counts under Valgrind, where it is installed: the regressor's counts
   recorded, then the perf tests compared on them (latency budgets skip, saying why);
6. the failure gallery: what a failing test looks like, with its artifacts.

With ``--copy-to DIR`` it runs in a fresh copy of the examples made there (what the
test run does, so that the checkout is left as it was). ``--without-instruction-counts``
leaves out steps 5 and 6: the test run does, because pytest-torch-perf's own tests run
the same sessions under Valgrind (record, then compare) with assertions on their output,
and a session under Valgrind is the costliest thing in the run. ``tox -e demo`` runs
every step, in ``examples/``. Stops at the first step that fails, with that step's exit status.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

# this folder is first on sys.path when a script of it runs
from release_check import GENERATED_FILES

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def steps(
    pytest_args: list[str], *, instruction_counts: bool = True
) -> list[tuple[str, list[str]]]:
    """(what it shows, the arguments to this Python) for each step, in order."""
    return [
        (
            "baselines are per machine: this machine's first, then the suite compares",
            shlex.split(
                "-m pytest --torch-update-perf -q --no-header -p no:randomly"
                " tests/test_performance.py -k speed_does_not_regress"
            ),
        ),
        (
            "the example suite: every feature, each end-of-run report once",
            ["-m", "pytest", *pytest_args],
        ),
        (
            "on two workers in deterministic mode: each worker's share of the cores and the"
            " deterministic settings are in the header",
            shlex.split(
                "-m pytest -n 2 --torch-deterministic -q tests/test_classifier.py"
                " tests/test_regressor.py tests/test_determinism.py"
            ),
        ),
        (
            "benchmark suites are opt-in: their tables, JSON and plots",
            shlex.split(
                "-m pytest --torch-benchmark -q tests/test_benchmarks.py"
                " --torch-benchmark-json=benchmark-results/benchmarks.json"
                " --torch-benchmark-plot=benchmark-results"
            ),
        ),
        *(instruction_steps() if instruction_counts else []),
        (
            "the failure gallery: failing tests, with their heatmaps and tensors",
            shlex.split("failure_gallery.py --torch-failure-artifacts=failure-artifacts"),
        ),
    ]


def instruction_steps() -> list[tuple[str, list[str]]]:
    """Counting instructions: where Valgrind is installed (Linux), none otherwise."""
    if shutil.which("valgrind") is None or not sys.platform.startswith("linux"):
        print("(the instruction-count steps need Valgrind: apt-get install valgrind)")
        return []
    counted = "--torch-perf-measure=instructions -q --no-header -p no:randomly"
    return [
        (
            "instruction counts under Valgrind: recorded once, keyed by torch, Python,"
            " Valgrind and CPU kernels instead of by machine",
            shlex.split(
                f"-m pytest --torch-update-perf {counted} tests/test_performance.py"
                " -k speed_does_not_regress"
            ),
        ),
        (
            "instruction counts compared: a 1 % gate no machine load moves (latency"
            " budgets are wall-clock: they skip, saying why)",
            shlex.split(f"-m pytest {counted} -rs tests/test_performance.py"),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help="the examples folder")
    parser.add_argument("--copy-to", type=Path, help="run in a fresh copy of the examples here")
    parser.add_argument(
        "--without-instruction-counts",
        action="store_true",
        help="leave out the two sessions under Valgrind (perf's own tests run them)",
    )
    options, pytest_args = parser.parse_known_args(argv)
    if options.copy_to is not None:
        shutil.rmtree(options.copy_to, ignore_errors=True)
        shutil.copytree(options.examples, options.copy_to, ignore=GENERATED_FILES)
        options.examples = options.copy_to
    chosen = steps(pytest_args, instruction_counts=not options.without_instruction_counts)
    if options.without_instruction_counts:
        print("(instruction counts under Valgrind left out: --without-instruction-counts)")
    for number, (shows, args) in enumerate(chosen, 1):
        print(f"\n== demo {number}: {shows}\n+ python {' '.join(args)}", flush=True)
        status = subprocess.call([sys.executable, *args], cwd=options.examples)
        if status != 0:
            print(f"demo step {number} failed (exit {status})", file=sys.stderr)
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
