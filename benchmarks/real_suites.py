"""A third-party test suite, run plain and with the family under each option: per-test
outcomes compared from JUnit XML, every difference classified, times side by side.

    python benchmarks/real_suites.py SUITE_DIR --python VENV/bin/python [TESTS ...]
        [--modes plain,autoload,leak,deterministic,xdist,artifacts] [--recheck]

SUITE_DIR is the suite's checkout (the runs start there), VENV a virtual environment
with the suite's requirements, pytest-xdist and the family installed (``pip install
-e packages/*`` from this repository); TESTS are the paths or node ids to run (default:
all). The runs:

- ``plain``: the family's plugins blocked (``-p no:torch_core`` ...), the reference;
- ``autoload``: the family loaded as installed, nothing asked of it;
- ``leak``: ``--torch-leak-check``; ``deterministic``: ``--torch-deterministic``;
- ``xdist``: ``-n 2`` with the family, against ``-n 2`` plain (run as ``plain -n 2``);
- ``artifacts``: ``--torch-failure-artifacts`` under ``GITHUB_ACTIONS=true``.

Each test's outcome is compared with the plain run's. A difference is classified:
``new failure`` (passed plain, fails here), ``new pass``, ``newly skipped``, ``outcome
changed`` (any other), ``missing``/``extra`` (collected in one run only). With
``--recheck``, the plain run is repeated twice more, then each differing test runs alone
(its node id), plain and under the mode, up to ``--alone`` times each (default 10; a
plain run stops at the first outcome the mode gave): a difference whose test changes
outcome between plain runs, or gives the mode's outcome in a plain run of its own, is
``flaky plain`` — a test drawing unseeded random numbers fails by chance, and torch seeds
every process differently. The table gives per mode the tests, the differences by
class, wall and CPU seconds and their ratios to plain. The messages of new failures
follow it, each with the report section in which the family explains it, or NOT
EXPLAINED.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

FAMILY = (
    "torch_core",
    "torch_perf",
    "torch_memory",
    "torch_determinism",
    "torch_xdist",
    "torch_ci",
)
BLOCKED = [arg for name in FAMILY for arg in ("-p", f"no:{name}")]
#: the report sections in which the family explains a failure it caused
SECTIONS = ("torch-leak-check", "torch-deterministic", "pytest-torch-ci")
MODES: dict[str, tuple[list[str], dict[str, str], str]] = {
    # name: (arguments, environment, the reference run)
    "plain": (BLOCKED, {}, ""),
    "autoload": ([], {}, "plain"),
    "leak": (["--torch-leak-check"], {}, "plain"),
    "deterministic": (["--torch-deterministic"], {}, "plain"),
    "plain -n 2": ([*BLOCKED, "-n", "2"], {}, ""),
    "xdist": (["-n", "2"], {}, "plain -n 2"),
    "artifacts": (["--torch-failure-artifacts={artifacts}"], {"GITHUB_ACTIONS": "true"}, "plain"),
}


class Run:
    """One run's outcomes by test id, its messages, and its times."""

    def __init__(self, outcomes: dict[str, str], messages: dict[str, str], wall: float,
                 cpu: float, returncode: int) -> None:  # fmt: skip
        self.outcomes, self.messages = outcomes, messages
        self.wall, self.cpu, self.returncode = wall, cpu, returncode


def outcomes_of(junit: Path) -> tuple[dict[str, str], dict[str, str]]:
    """Outcome (passed, failed, error, skipped, xfailed) and message of each test case."""
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    if not junit.exists():
        return outcomes, messages
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        found = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if not found:
            outcome = "passed"
        else:
            last = found[-1]
            outcome = {"failure": "failed", "error": "error"}.get(last.tag, "skipped")
            if last.tag == "skipped" and last.get("type") == "pytest.xfail":
                outcome = "xfailed"
            messages[test] = f"{last.get('message') or ''}\n{last.text or ''}".strip()
        outcomes[test] = outcome
    return outcomes, messages


def run(python: str, suite: Path, tests: list[str], mode: str, scratch: Path,
        tag: str = "") -> Run:  # fmt: skip
    arguments, environment, _ = MODES[mode]
    junit = scratch / f"{mode.replace(' ', '_')}{tag}.xml"
    artifacts = scratch / f"artifacts-{mode.replace(' ', '_')}"
    arguments = [a.format(artifacts=artifacts) for a in arguments]
    env = {**os.environ, **environment}
    env.pop("PYTEST_ADDOPTS", None)
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
               "junit_family=xunit2", f"--junitxml={junit}", *arguments, *tests]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        print(
            f"{mode}: pytest exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return Run(*outcomes_of(junit), wall, cpu, done.returncode)


def classify(reference: str | None, outcome: str | None) -> str | None:
    """The class of a difference between the plain outcome and this one (None: same)."""
    if reference == outcome:
        return None
    if reference is None:
        return "extra"
    if outcome is None:
        return "missing"
    if reference == "passed" and outcome in ("failed", "error"):
        return "new failure"
    if reference in ("failed", "error") and outcome == "passed":
        return "new pass"
    if outcome == "skipped":
        return "newly skipped"
    return "outcome changed"


def flaky_in_plain(python: str, suite: Path, tests: list[str], scratch: Path,
                   first: Run) -> dict[str, str]:  # fmt: skip
    """The tests whose outcome changes between the first plain run and two more, each
    with what the three runs gave."""
    seen = {test: [outcome] for test, outcome in first.outcomes.items()}
    for _ in range(2):
        for test, outcome in run(python, suite, tests, "plain", scratch).outcomes.items():
            seen.setdefault(test, []).append(outcome)
    return {
        test: f"3 whole plain runs: {', '.join(outcomes)}"
        for test, outcomes in seen.items()
        if len(set(outcomes)) > 1
    }


def node_id(suite: Path, test: str) -> str | None:
    """The node id of a JUnit ``classname::name``: the longest dotted prefix of the class
    name that is a file under the suite (or a folder above it) is the module."""
    classname, _, name = test.partition("::")
    parts = classname.split(".")
    for root in (suite, *suite.parents):
        for i in range(len(parts), 0, -1):
            path = root / ("/".join(parts[:i]) + ".py")
            if path.is_file():
                return "::".join([os.path.relpath(path, suite), *parts[i:], name])
    return None


def alone(python: str, suite: Path, node: str, mode: str, scratch: Path, times: int,
          stop_at: str | None = None) -> Counter[str]:  # fmt: skip
    """The outcomes of ``times`` runs of one test by itself, each in its own process."""
    seen: Counter[str] = Counter()
    for _ in range(times):
        outcomes = run(python, suite, [node], mode, scratch, tag="-alone").outcomes
        seen[next(iter(outcomes.values()), "not collected")] += 1
        if stop_at is not None and seen[stop_at]:
            break
    return seen


def recheck_alone(python: str, suite: Path, scratch: Path, times: int, runs: dict[str, Run],
                  differences: dict[str, list[tuple[str, str]]],
                  flaky: dict[str, str]) -> dict[tuple[str, str], str]:  # fmt: skip
    """Each difference's test run alone, plain and under its mode: what each gave, and
    the test added to ``flaky`` when a plain run of its own gives the mode's outcome."""
    said: dict[tuple[str, str], str] = {}
    for mode, found in differences.items():
        reference = MODES[mode][2]
        for test, kind in found:
            if test in flaky:
                said[mode, test] = flaky[test]
                continue
            if kind in ("missing", "extra"):
                continue
            node = node_id(suite, test)
            if node is None:
                said[mode, test] = "no node id found for a run of its own"
                continue
            outcome = runs[mode].outcomes[test]
            plain = alone(python, suite, node, reference, scratch, times, stop_at=outcome)
            here = alone(python, suite, node, mode, scratch, times)
            if plain[outcome]:
                flaky[test] = f"a plain run of its own gave {outcome}"
            said[mode, test] = f"alone, {reference}: {tally(plain)}; {mode}: {tally(here)}"
            print(f"{mode}: {test}: {said[mode, test]}", flush=True)
    return said


def tally(outcomes: Counter[str]) -> str:
    total = sum(outcomes.values())
    return ", ".join(f"{n} {outcome}" for outcome, n in outcomes.most_common()) + f" of {total}"


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of runs, at least 1, not {text!r}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="the suite's checkout: runs start there")
    parser.add_argument("tests", nargs="*", help="paths or node ids (default: all)")
    parser.add_argument("--python", required=True, help="the venv's python")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated runs")
    parser.add_argument(
        "--recheck", action="store_true", help="run plain twice more, and differing tests alone"
    )
    parser.add_argument(
        "--alone", type=_at_least_one, default=10, metavar="N",
        help="with --recheck: runs of each alone",
    )  # fmt: skip
    options = parser.parse_intermixed_args()  # tests may follow the options
    # the runs start in the suite: a relative path would be read from there; not resolved,
    # a venv's python is a link that must stay one
    options.python = os.path.abspath(options.python)
    modes = [m for m in MODES if m in options.modes.split(",")]
    for mode in list(modes):  # a mode needs its reference run
        reference = MODES[mode][2]
        if reference and reference not in modes:
            modes.insert(0, reference)
    scratch = Path(tempfile.mkdtemp(prefix="pytest-torch-real-"))
    runs: dict[str, Run] = {}
    for mode in modes:
        runs[mode] = run(options.python, options.suite.resolve(), options.tests, mode, scratch)
        print(f"{mode}: {len(runs[mode].outcomes)} tests, {runs[mode].wall:.1f} s", flush=True)
    differences: dict[str, list[tuple[str, str]]] = {}
    for mode in modes:
        reference = MODES[mode][2]
        if not reference:
            continue
        base, here = runs[reference], runs[mode]
        for test in sorted(set(base.outcomes) | set(here.outcomes)):
            kind = classify(base.outcomes.get(test), here.outcomes.get(test))
            if kind is not None:
                differences.setdefault(mode, []).append((test, kind))
    flaky: dict[str, str] = {}
    said: dict[tuple[str, str], str] = {}
    if options.recheck and differences and "plain" in runs:
        suite = options.suite.resolve()
        flaky = flaky_in_plain(options.python, suite, options.tests, scratch, runs["plain"])
        said = recheck_alone(options.python, suite, scratch, options.alone, runs, differences,
                             flaky)  # fmt: skip
    report(modes, runs, differences, flaky, said)
    print(f"JUnit XML and artifacts in {scratch}")
    return 0


def report(modes: list[str], runs: dict[str, Run], differences: dict[str, list[tuple[str, str]]],
           flaky: dict[str, str], said: dict[tuple[str, str], str]) -> None:  # fmt: skip
    header = (f"{'run':<14} {'tests':>6} {'same':>6}  {'differences':<40} {'wall s':>7} {'x':>5}"
              f" {'cpu s':>7} {'x':>5}")  # fmt: skip
    print("\n" + header + "\n" + "-" * len(header))
    for mode in modes:
        here = runs[mode]
        reference = MODES[mode][2]
        base = runs.get(reference) if reference else None
        found = differences.get(mode, [])
        kinds = Counter("flaky plain" if test in flaky else kind for test, kind in found)
        text = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common()) or "-"
        same = len(here.outcomes) - len(found) if base else len(here.outcomes)
        wall = f"{here.wall / base.wall:5.2f}" if base and base.wall else "    -"
        cpu = f"{here.cpu / base.cpu:5.2f}" if base and base.cpu else "    -"
        print(f"{mode:<14} {len(here.outcomes):>6} {same:>6}  {text:<40} {here.wall:>7.1f} {wall}"
              f" {here.cpu:>7.1f} {cpu}")  # fmt: skip
    for mode, found in differences.items():
        for test, kind in found:
            if test in flaky:
                print(f"\n{mode}: {test}: {kind}, flaky plain ({said.get((mode, test), '')})")
            elif kind == "new failure":
                text = runs[mode].messages.get(test, "")
                sections = [name for name in SECTIONS if f" {name} " in text]
                why = f"explained in {', '.join(sections)}" if sections else "NOT EXPLAINED"
                alone_said = f"; {said[mode, test]}" if (mode, test) in said else ""
                print(f"\n{mode}: {test}: new failure ({why}{alone_said})\n  "
                      + "\n  ".join(text.splitlines()[:3]))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
