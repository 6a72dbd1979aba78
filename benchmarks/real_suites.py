"""A third-party test suite, run plain and with the family under each option: per-test
outcomes compared from JUnit XML, every difference classified, times side by side.

    python benchmarks/real_suites.py SUITE_DIR --python VENV/bin/python [TESTS ...]
        [--modes plain,autoload,leak,deterministic,xdist,artifacts] [--recheck]
        [--alone N] [--jobs N]

SUITE_DIR is the suite's checkout (the runs start there), VENV a virtual environment
with the suite's requirements, pytest-xdist and the family installed (``pip install
-e packages/*`` from this repository); TESTS are the paths or node ids to run (default:
all). The runs:

- ``plain``: the family's plugins blocked (``-p no:torch_core`` ...), the reference;
- ``autoload``: the family loaded as installed, nothing asked of it;
- ``leak``: ``--torch-leak-check``;
- ``deterministic``: ``--torch-deterministic``, with every test requesting ``torch_seed``
  through an autouse fixture, as the docs advise for a whole suite (a plugin module
  written into the scratch folder, loaded with ``-p``; the suite is not touched);
- ``xdist``: ``-n 2`` with the family, against ``-n 2`` plain (run as ``plain -n 2``);
- ``artifacts``: ``--torch-failure-artifacts`` under ``GITHUB_ACTIONS=true``, with
  ``GITHUB_STEP_SUMMARY`` set to a file in the scratch folder.

Up to ``--jobs`` runs go at once (default: half the CPUs, at least 1); each run's wall
and CPU seconds are its own process's (``os.wait4``: xdist workers included), right
however many overlap, though overlapping runs wait for each other's CPUs.

Each test's outcome is compared with its reference run's (``plain``; ``plain -n 2``
for ``xdist``). A difference is classified: ``new failure`` (passed there, fails here),
``new pass``, ``newly skipped``, ``outcome changed`` (any other), ``missing``/``extra``
(collected in one run only). With ``--recheck``, the differing tests are run again
plain, together by node id, twice; then each runs alone, plain and under its mode, up
to ``--alone`` times each (default 10): the plain runs stop at the first that gives the
mode's outcome, the mode's at the first that gives it again. A difference whose test
changes outcome between plain runs, or gives the mode's outcome in a plain run of its
own, is ``flaky plain`` (a test drawing unseeded random numbers fails by chance, and
torch seeds every process differently); then the mode is not run alone. A new failure
whose message is one of the family's own verdicts (a memory leak, a memory budget, a
perf or determinism check) is the family's doing: it is not run plain again, only
alone under its mode.

The table gives per mode the tests, the differences by class (``ACTED ON NO TEST``
where the family's end-of-run lines say its option reached none of the tests), wall
and CPU seconds and their ratios to the reference. After it: each mode's end-of-run
lines (those starting ``torch: `` after the test progress, with their indented
continuations), the artifacts run's checks (its job summary's heading agrees with
pytest's final counts; every failed test has a ``::error`` annotation), and the new
failures' messages, each with the family's verdict or report section that explains
it, or NOT EXPLAINED. The last lines name the folder and the files the table came
from (every run, rerun included, keeps its own JUnit XML and output; ``runs.txt``
there lists each with its command) and the harness's own wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

FAMILY = (
    "torch_core",
    "torch_perf",
    "torch_memory",
    "torch_determinism",
    "torch_xdist",
    "torch_ci",
    "torch_distributed",
)
BLOCKED = [arg for name in FAMILY for arg in ("-p", f"no:{name}")]
#: the report sections in which the family explains a failure it caused
SECTIONS = ("torch-leak-check", "torch-deterministic", "pytest-torch-ci")
#: the family's own verdicts, as the failure message says them: (pattern, which verdict)
VERDICTS: tuple[tuple[str, str], ...] = (
    (r"(?:^|: )memory leak: ", "memory leak (--torch-leak-check)"),
    (r"peak memory on \S+ was .* over the\s+torch_max_memory budget", "memory budget"),
    (r"peak memory on \S+: [\d.]+ MiB vs baseline", "peak-memory regression"),
    (r"(?:^|: )latency budget exceeded: ", "latency budget"),
    (r"(?:^|: )performance regression in ", "performance regression"),
    (r"never called\s+latency\(\.\.\.\), so nothing was checked", "unused latency budget"),
    (r": over its torch\.compile budget \(", "torch.compile budget"),
    (r"to compile with no graph break; torch\.compile broke it", "graph breaks"),
    (r"expected no host-device synchronisation, found", "host-device synchronisation"),
    (r"(?:^|: )not deterministic: ", "not deterministic"),
)
#: the plugin module the deterministic run loads with -p from the scratch folder
SEED_MODULE = "real_suites_seed_every_test"
SEED_PLUGIN = '''"""Written by benchmarks/real_suites.py: every test requests torch_seed,
as the docs advise for a whole suite (autouse fixtures reach unittest.TestCase methods)."""

import pytest


@pytest.fixture(autouse=True)
def _pytest_torch_seed_every_test(torch_seed):
    yield
'''
#: environment variables that would change a run behind the harness's back
CLEARED = ("PYTEST_ADDOPTS", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")


class Mode(NamedTuple):
    arguments: list[str]
    #: values may name {scratch}, {artifacts} and {summary}; PYTHONPATH is prepended to
    environment: dict[str, str]
    #: the run it is compared with ("": a reference itself)
    reference: str


MODES: dict[str, Mode] = {
    "plain": Mode(BLOCKED, {}, ""),
    "autoload": Mode([], {}, "plain"),
    "leak": Mode(["--torch-leak-check"], {}, "plain"),
    "deterministic": Mode(
        ["-p", SEED_MODULE, "--torch-deterministic"], {"PYTHONPATH": "{scratch}"}, "plain"
    ),
    "plain -n 2": Mode([*BLOCKED, "-n", "2"], {}, ""),
    "xdist": Mode(["-n", "2"], {}, "plain -n 2"),
    "artifacts": Mode(
        ["--torch-failure-artifacts={artifacts}"],
        {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "{summary}"},
        "plain",
    ),
}


@dataclass
class Run:
    """One pytest process: the stem of its files, its mode and arguments, its outcomes
    and messages by JUnit id (``classname::name``), its output, exit status and times,
    and the environment variables the harness set for it."""

    stem: str
    mode: str
    tests: list[str]
    command: list[str]
    outcomes: dict[str, str]
    messages: dict[str, str]
    output: str
    returncode: int
    wall: float
    cpu: float
    environment: dict[str, str] = field(default_factory=dict)


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


def execute(
    command: list[str], cwd: Path, env: dict[str, str], log: Path
) -> tuple[int, float, float]:
    """Run ``command`` with its output in ``log``: its exit status, its wall seconds and
    its CPU seconds, from its own resource usage (``os.wait4``, with the processes it
    waited for, such as xdist's workers): right however many runs overlap, which
    ``RUSAGE_CHILDREN``, shared by them all, is not."""
    with log.open("wb") as out:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            child.kill()
            child.wait()
            raise
        wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    return child.returncode, wall, usage.ru_utime + usage.ru_stime


class Runner:
    """Starts the runs, each with its own files in the scratch folder: the table's under
    their mode's name, every other numbered (``plain-rerun-2``, ``alone-leak-7``)."""

    def __init__(self, python: str, suite: Path, scratch: Path) -> None:
        self.python, self.suite, self.scratch = python, suite, scratch
        self.runs: list[Run] = []
        self._lock = threading.Lock()
        self._numbers: Counter[str] = Counter()
        (scratch / f"{SEED_MODULE}.py").write_text(SEED_PLUGIN)

    def numbered(self, base: str) -> str:
        with self._lock:
            self._numbers[base] += 1
            return f"{base}-{self._numbers[base]}"

    def run(self, mode: str, tests: Sequence[str], stem: str) -> Run:
        arguments, environment, _ = MODES[mode]
        places = {
            "scratch": str(self.scratch),
            "artifacts": str(self.scratch / f"{stem}-failure-artifacts"),
            "summary": str(self.scratch / f"{stem}-summary.md"),
        }
        env = {key: value for key, value in os.environ.items() if key not in CLEARED}
        changed = {}
        for key, value in environment.items():
            value = value.format(**places)
            if key == "PYTHONPATH" and env.get(key):
                value += os.pathsep + env[key]
            env[key] = changed[key] = value
        junit = self.scratch / f"{stem}.xml"
        command = [self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
                   "junit_family=xunit2", f"--junitxml={junit}",
                   *(a.format(**places) for a in arguments), *tests]  # fmt: skip
        log = self.scratch / f"{stem}.out"
        returncode, wall, cpu = execute(command, self.suite, env, log)
        output = COLOUR.sub("", log.read_text(errors="replace"))
        if returncode not in (0, 1):
            print(f"{stem}: pytest exited {returncode} (all of it in {log.name}):\n"
                  f"{output[-2000:]}", flush=True)  # fmt: skip
        found = Run(stem, mode, list(tests), command, *outcomes_of(junit), output, returncode,
                    wall, cpu, changed)  # fmt: skip
        with self._lock:
            self.runs.append(found)
        return found

    def write_index(self) -> Path:
        """``runs.txt``: every run's files, mode, exit status, times and command."""
        index = self.scratch / "runs.txt"
        lines = []
        for r in self.runs:
            environment = [f"{key}={value}" for key, value in r.environment.items()]
            lines += [
                f"{r.stem}.xml {r.stem}.out  {r.mode}  exit {r.returncode}  {r.wall:.1f} s wall"
                f"  {r.cpu:.1f} s cpu",
                f"  {shlex.join([*environment, *r.command])}",
            ]
        index.write_text("\n".join(lines) + "\n")
        return index


T = TypeVar("T")
R = TypeVar("R")


def side_by_side(jobs: int, work: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``work`` on each item, up to ``jobs`` at once, the results in the items' order."""
    items = list(items)
    if jobs <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(work, items))


# -- what the runs say ---------------------------------------------------------------------

#: a line of pytest's test progress ("....F.  [ 50%]", "test_a.py::t PASSED  [100%]",
#: under xdist with -v "[gw1] [ 50%] PASSED test_a.py::t")
PROGRESS = re.compile(r"\[\s*\d+%\]\s*$|^\[gw\d+\] \[\s*\d+%\]")
#: a terminal colour (a suite's addopts may say --color=yes)
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
#: pytest's final line: "2 failed, 1360 passed in 12.34s", "= 3 passed in 61.20s (0:01:01) ="
FINAL = re.compile(r"^=*\s*(?P<counts>\S.*?) in [\d.]+s(?: \([\d:.]+\))?\s*=*$")


def end_lines(output: str) -> list[str]:
    """The family's end-of-run lines: those starting ``torch: `` after the last line of
    test progress (header lines before the tests start so too), each with the indented
    lines that continue it."""
    lines = output.splitlines()
    last = max((i for i, line in enumerate(lines) if PROGRESS.search(line)), default=-1)
    found: list[str] = []
    keep = False
    for line in lines[last + 1 :]:
        keep = line.startswith("torch: ") or (keep and line.startswith("  "))
        if keep:
            found.append(line)
    return found


def acted_on_none(lines: Iterable[str]) -> bool:
    """Whether an end-of-run line says its check reached none of the tests."""
    return any(line.startswith("torch: ") and "none of the" in line for line in lines)


def verdict(message: str) -> str | None:
    """Which of the family's own verdicts a failure message is, if any."""
    for pattern, name in VERDICTS:
        if re.search(pattern, message, re.M):
            return name
    return None


def explanation(message: str) -> str | None:
    """How the family explains a failure: its verdict, or its report section."""
    found = verdict(message)
    if found is not None:
        return f"the family's verdict: {found}"
    sections = [name for name in SECTIONS if f" {name} " in message]
    return f"explained in {', '.join(sections)}" if sections else None


def counts_of(text: str) -> dict[str, int]:
    """``2 failed, 1360 passed, 1 error, 3 warnings`` as ``{"failed": 2, "passed": 1360,
    "error": 1, "warning": 3}``; ``no tests ran`` as ``{}``."""
    counts: dict[str, int] = {}
    for part in text.split(","):
        match = re.fullmatch(r"(\d+) (\S.*)", part.strip())
        if match:
            word = {"errors": "error", "warnings": "warning"}.get(match[2], match[2])
            counts[word] = counts.get(word, 0) + int(match[1])
    return counts


def final_line(output: str) -> str | None:
    """pytest's final line without its time: ``2 failed, 1360 passed, 28 skipped``."""
    for line in reversed(output.splitlines()):
        match = FINAL.match(line.strip())
        if match:
            return match["counts"]
    return None


def summary_check(summary: Path, output: str) -> tuple[bool, str]:
    """Whether the job summary exists and its heading (``## pytest-torch: <counts>`` or
    ``## pytest-torch: no failures: <counts>``) agrees with pytest's final counts, in the
    same words (warnings and errors included), and what was found."""
    if not summary.exists():
        return False, f"NO JOB SUMMARY: {summary.name} was not written"
    prefix = "## pytest-torch: "
    headings = [line for line in summary.read_text().splitlines() if line.startswith(prefix)]
    if len(headings) != 1:
        return False, f"{summary.name} has {len(headings)} '{prefix.strip()}' headings, not 1"
    heading = headings[0].removeprefix(prefix)
    said_no_failures = heading.startswith("no failures: ")
    theirs = counts_of(heading.removeprefix("no failures: "))
    line = final_line(output)
    if line is None:
        return False, f"the summary says {heading!r}, and pytest's final line was not found"
    pytest_counts = counts_of(line)
    failed = pytest_counts.get("failed", 0) + pytest_counts.get("error", 0)
    if theirs != pytest_counts or said_no_failures == bool(failed):
        return False, f"DISAGREES: the summary says {heading!r}, pytest {line!r}"
    return True, f"agrees: the summary says {heading!r}, pytest {line!r}"


def _tests(count: int) -> str:
    return f"{count} test{'s' if count != 1 else ''}"


def unescape(text: str) -> str:
    """A workflow command's escaped data or property, as written."""
    for escaped, plain in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, plain)
    return text


def annotations(output: str) -> list[tuple[str, str]]:
    """The title and message of every ``::error`` line of a run's output."""
    found = []
    for line in output.splitlines():
        if not line.startswith("::error"):
            continue
        properties, _, message = line.removeprefix("::error").partition("::")
        values = dict(p.strip().partition("=")[::2] for p in properties.split(",") if p.strip())
        found.append((unescape(values.get("title", "")), unescape(message)))
    return found


def annotation_check(failed: dict[str, str], output: str) -> tuple[bool, str]:
    """Whether every failed test (JUnit id -> the part of its node id after the file)
    has an ``::error`` line: its own (titled ``<name> failed``, ``<name>: <kind>`` or
    ``<name> (error in ...)``), or is counted in the last one (``N more failed tests``)
    once there are more than the plugin prints."""
    found = annotations(output)
    if not failed:
        extra = f", but {len(found)} ::error lines" if found else ""
        return not found, f"no failed test in the JUnit file{extra}"
    titles = [title for title, _ in found]
    own = [
        test
        for test, name in failed.items()
        if any(re.match(re.escape(name) + r"(?: failed| \(error in |: )", t) for t in titles)
    ]
    rest = [test for test in failed if test not in own]
    more = [re.fullmatch(r"(\d+) more failed tests", title) for title in titles]
    counted = max((int(match[1]) for match in more if match), default=0)
    if counted < len(rest):
        shown = ", ".join(rest[:5]) + (f" and {len(rest) - 5} more" if len(rest) > 5 else "")
        return False, (
            f"MISSING: {len(rest)} of the {_tests(len(failed))} that failed have no ::error line"
            f"{f' (the last one counts {counted})' if counted else ''}: {shown}"
        )
    tail = f", {len(rest)} counted in the last one ('{counted} more failed tests')" if rest else ""
    return True, f"{_tests(len(failed))} failed: {len(own)} annotated one by one{tail}"


# -- node ids ------------------------------------------------------------------------------


def _roots(suite: Path, tests: Sequence[str]) -> list[Path]:
    """Where the run's rootdir may be, nearest first: pytest's rootdir is the folder its
    paths share or one above it (where the suite's ini file or setup.py is)."""
    paths = [suite / test.split("::")[0] for test in tests] or [suite]
    common = Path(os.path.commonpath([os.path.abspath(p) for p in paths]))
    if common.is_file() or common.suffix == ".py":
        common = common.parent
    found = [common, *common.parents]
    for path in (suite, *paths):
        found += [p for p in (path, *path.parents) if p not in found]
    return found


def node_id(suite: Path, test: str, tests: Sequence[str] = ()) -> str | None:
    """The node id, from the suite's folder, of a JUnit ``classname::name`` from a run of
    ``tests`` (JUnit names a file by its path from the rootdir, dotted): the longest
    dotted prefix of the class name that is a file under a possible rootdir (the nearest
    of those with the longest) is the module, the rest its classes (``path.py::Class::test``
    for a unittest method). The longest, as ``einops.tests.test_ops`` is
    ``einops/tests/test_ops.py`` from the checkout, not ``einops.py`` from its package."""
    classname, _, name = test.partition("::")
    parts = classname.split(".")
    best: tuple[int, Path] | None = None
    for root in _roots(suite, tests):
        for i in range(len(parts), best[0] if best else 0, -1):
            path = root / ("/".join(parts[:i]) + ".py")
            if path.is_file():
                best = (i, path)
                break
    if best is None:
        return None
    i, path = best
    return "::".join([os.path.relpath(path, suite), *parts[i:], name])


def in_file(node: str | None, test: str) -> str:
    """The part of a node id after its file (``Class::test[x]``), as pytest-torch-ci
    names a test in an annotation's title; the JUnit name without a node id."""
    return node.split("::", 1)[1] if node else test.partition("::")[2]


# -- comparing and rechecking --------------------------------------------------------------


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


def differences_of(modes: list[str], runs: dict[str, Run]) -> dict[str, list[tuple[str, str]]]:
    """Per mode, each test whose outcome differs from the reference run's, and how."""
    differences: dict[str, list[tuple[str, str]]] = {}
    for mode in modes:
        reference = MODES[mode].reference
        if not reference:
            continue
        base, here = runs[reference], runs[mode]
        for test in sorted(set(base.outcomes) | set(here.outcomes)):
            kind = classify(base.outcomes.get(test), here.outcomes.get(test))
            if kind is not None:
                differences.setdefault(mode, []).append((test, kind))
    return differences


def tally(outcomes: Counter[str]) -> str:
    total = sum(outcomes.values())
    return ", ".join(f"{n} {outcome}" for outcome, n in outcomes.most_common()) + f" of {total}"


class Wanted(NamedTuple):
    """A difference to recheck: the mode, the outcome it gave, whether the family's
    verdict explains it."""

    mode: str
    outcome: str
    explained: bool


class Recheck:
    """The reruns of ``--recheck``: the differing tests plain, together, then each alone.
    ``flaky`` holds the tests found flaky plain and why, ``said`` what the reruns of each
    difference gave."""

    def __init__(self, runner: Runner, runs: dict[str, Run], times: int, jobs: int) -> None:
        self.runner, self.runs, self.times, self.jobs = runner, runs, times, jobs
        self.flaky: dict[str, str] = {}
        self.said: dict[tuple[str, str], str] = {}

    def __call__(self, differences: dict[str, list[tuple[str, str]]]) -> None:
        suite, asked = self.runner.suite, next(iter(self.runs.values())).tests
        nodes: dict[str, str] = {}
        wanted: dict[str, list[Wanted]] = {}
        for mode, found in differences.items():
            for test, kind in found:
                if kind in ("missing", "extra"):
                    continue
                node = nodes.get(test) or node_id(suite, test, asked)
                if node is None:
                    self.said[mode, test] = "no node id found for a run of its own"
                    continue
                nodes[test] = node
                here = self.runs[mode]
                message = here.messages.get(test, "")
                explained = kind == "new failure" and verdict(message) is not None
                wanted.setdefault(test, []).append(Wanted(mode, here.outcomes[test], explained))
        # a failure the family's verdict explains needs no plain rerun
        unexplained = [test for test, each in wanted.items() if not all(w.explained for w in each)]
        if unexplained:
            self.plain_together({test: nodes[test] for test in sorted(unexplained)})
        side_by_side(self.jobs, lambda test: self.alone_each(test, nodes[test], wanted[test]),
                     sorted(wanted))  # fmt: skip

    def plain_together(self, nodes: dict[str, str]) -> None:
        """The tests run plain twice more, together by node id: those whose outcome
        changes between the plain runs are flaky plain."""
        first = self.runs.get("plain")
        seen = {test: [first.outcomes.get(test, "missing")] if first else [] for test in nodes}
        by_node = {node: test for test, node in nodes.items()}
        ids = sorted(by_node)

        def rerun(_: int) -> Run:
            return self.runner.run("plain", ids, self.runner.numbered("plain-rerun"))

        for again in side_by_side(self.jobs, rerun, range(2)):
            got = {}
            for test, outcome in again.outcomes.items():  # named from its own rootdir
                got[by_node.get(node_id(self.runner.suite, test, ids) or "")] = outcome
            for test in nodes:
                seen[test].append(got.get(test, "not collected"))
        runs = "the plain run, then 2 reruns of the differing tests" if first else "2 plain runs"
        for test, outcomes in seen.items():
            if len(set(outcomes) - {"not collected"}) > 1:
                self.flaky[test] = f"{runs}: {', '.join(outcomes)}"

    def alone(self, mode: str, node: str, stop_at: str) -> Counter[str]:
        """The outcomes of up to ``times`` runs of one test by itself, each in its own
        process, stopping at the first that gives ``stop_at`` (or collects nothing)."""
        seen: Counter[str] = Counter()
        for _ in range(self.times):
            stem = self.runner.numbered(f"alone-{mode.replace(' ', '_')}")
            outcomes = self.runner.run(mode, [node], stem).outcomes
            seen[next(iter(outcomes.values()), "not collected")] += 1
            if seen[stop_at] or seen["not collected"]:
                break
        return seen

    def alone_each(self, test: str, node: str, wanted: list[Wanted]) -> None:
        """One test alone: plain until it gives the mode's outcome (once per reference run
        and outcome); then, where plain never gave it, under the mode until it does."""
        plain: dict[tuple[str, str], Counter[str]] = {}
        for mode, outcome, explained in wanted:
            reference = MODES[mode].reference
            if test in self.flaky:
                self.said[mode, test] = self.flaky[test]
                continue
            before = "no plain run (the family's verdict)"
            if not explained:
                if (reference, outcome) not in plain:
                    plain[reference, outcome] = self.alone(reference, node, outcome)
                before = f"{reference}: {tally(plain[reference, outcome])}"
                if plain[reference, outcome][outcome]:
                    self.flaky[test] = f"a {reference} run of its own gave {outcome}"
                    self.said[mode, test] = f"alone, {before}"
                    print(f"{mode}: {test}: {self.said[mode, test]}", flush=True)
                    continue
            here = self.alone(mode, node, outcome)
            self.said[mode, test] = f"alone, {before}; {mode}: {tally(here)}"
            print(f"{mode}: {test}: {self.said[mode, test]}", flush=True)


# -- the report ----------------------------------------------------------------------------


def report(runner: Runner, modes: list[str], runs: dict[str, Run],
           differences: dict[str, list[tuple[str, str]]], recheck: Recheck | None,
           jobs: int) -> None:  # fmt: skip
    flaky = recheck.flaky if recheck else {}
    texts = {}
    for mode in modes:
        found = differences.get(mode, [])
        kinds = Counter("flaky plain" if test in flaky else kind for test, kind in found)
        found = [f"{n} {kind}" for kind, n in kinds.most_common()]
        if acted_on_none(end_lines(runs[mode].output)):
            found.insert(0, "ACTED ON NO TEST")
        texts[mode] = ", ".join(found) or "-"
    width = max(40, *(len(text) for text in texts.values()))
    header = (f"{'run':<14} {'tests':>6} {'same':>6}  {'differences':<{width}} {'wall s':>7}"
              f" {'x':>5} {'cpu s':>7} {'x':>5}")  # fmt: skip
    print("\n" + header + "\n" + "-" * len(header))
    for mode in modes:
        here = runs[mode]
        reference = MODES[mode].reference
        base = runs.get(reference) if reference else None
        same = len(here.outcomes) - len(differences.get(mode, [])) if base else len(here.outcomes)
        wall = f"{here.wall / base.wall:5.2f}" if base and base.wall else "    -"
        cpu = f"{here.cpu / base.cpu:5.2f}" if base and base.cpu else "    -"
        print(f"{mode:<14} {len(here.outcomes):>6} {same:>6}  {texts[mode]:<{width}}"
              f" {here.wall:>7.1f} {wall} {here.cpu:>7.1f} {cpu}")  # fmt: skip
    if jobs > 1:
        print(f"(up to {jobs} runs at once: their wall seconds include waiting for each other's"
              " CPUs; compare CPU seconds)")  # fmt: skip
    report_end_lines(modes, runs)
    if "artifacts" in runs:
        report_artifacts(runner, runs["artifacts"])
    report_differences(runs, differences, recheck)


def report_end_lines(modes: list[str], runs: dict[str, Run]) -> None:
    """Each mode's end-of-run lines, flagged where they say it reached no test."""
    print("\nThe family's end-of-run lines:")
    for mode in modes:
        lines = end_lines(runs[mode].output)
        if mode in ("plain", "plain -n 2") and not lines:
            continue
        flag = "ACTED ON NO TEST: " if acted_on_none(lines) else ""
        print(f"  {mode}: {flag}" + ("\n    ".join(lines) if lines else "(none)"))


def report_artifacts(runner: Runner, run: Run) -> None:
    """The artifacts run's job summary against pytest's counts, and its annotations
    against the JUnit file's failed tests."""
    path = runner.scratch / f"{run.stem}-summary.md"
    print(f"\nartifacts: job summary ({path.name}): {summary_check(path, run.output)[1]}")
    failed = {
        test: in_file(node_id(runner.suite, test, run.tests), test)
        for test, outcome in run.outcomes.items()
        if outcome in ("failed", "error")
    }
    print(f"artifacts: annotations: {annotation_check(failed, run.output)[1]}")


def report_differences(runs: dict[str, Run], differences: dict[str, list[tuple[str, str]]],
                       recheck: Recheck | None) -> None:  # fmt: skip
    """The flaky differences with what the reruns gave, and the new failures' messages."""
    flaky = recheck.flaky if recheck else {}
    said = recheck.said if recheck else {}
    for mode, found in differences.items():
        for test, kind in found:
            again = said.get((mode, test))
            if test in flaky:
                print(f"\n{mode}: {test}: {kind}, flaky plain ({again or flaky[test]})")
            elif kind == "new failure":
                text = runs[mode].messages.get(test, "")
                why = explanation(text) or "NOT EXPLAINED"
                alone = f"; {again}" if again else ""
                print(f"\n{mode}: {test}: new failure ({why}{alone})\n  "
                      + "\n  ".join(text.splitlines()[:3]))  # fmt: skip
            elif again:
                print(f"\n{mode}: {test}: {kind} ({again})")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number, at least 1, not {text!r}")
    return value


def default_jobs() -> int:
    """Half the CPUs this process may use, at least 1: 1 on a 2-core machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cpus or 1) // 2)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", type=Path, help="the suite's checkout: runs start there")
    parser.add_argument("tests", nargs="*", help="paths or node ids (default: all)")
    parser.add_argument("--python", required=True, help="the venv's python")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated runs")
    parser.add_argument(
        "--recheck", action="store_true",
        help="run the differing tests plain twice more, then each alone",
    )  # fmt: skip
    parser.add_argument(
        "--alone", type=_at_least_one, default=10, metavar="N",
        help="with --recheck: runs of each alone, at most",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=_at_least_one, default=default_jobs(), metavar="N",
        help=f"runs at once (default here: {default_jobs()}, half the CPUs)",
    )  # fmt: skip
    return parser.parse_intermixed_args(argv)  # tests may follow the options


def main() -> int:
    started = time.perf_counter()
    options = parse()
    # the runs start in the suite: a relative path would be read from there; not resolved,
    # a venv's python is a link that must stay one
    options.python = os.path.abspath(options.python)
    if not os.access(options.python, os.X_OK):
        sys.exit(f"--python {options.python}: no such executable")
    asked = options.modes.split(",")
    unknown = [mode for mode in asked if mode not in MODES]
    if unknown:
        sys.exit(f"unknown mode(s) {', '.join(unknown)}; the modes: {', '.join(MODES)}")
    # a mode needs its reference run; the table in the order of MODES
    wanted = {*asked, *(MODES[mode].reference for mode in asked)}
    modes = [mode for mode in MODES if mode in wanted]
    scratch = Path(tempfile.mkdtemp(prefix="pytest-torch-real-"))
    runner = Runner(options.python, options.suite.resolve(), scratch)

    def table_run(mode: str) -> Run:
        found = runner.run(mode, options.tests, mode.replace(" ", "_"))
        print(f"{mode}: {len(found.outcomes)} tests, {found.wall:.1f} s", flush=True)
        return found

    runs = dict(zip(modes, side_by_side(options.jobs, table_run, modes), strict=True))
    table_wall = time.perf_counter() - started
    differences = differences_of(modes, runs)
    recheck = None
    if options.recheck and differences:
        recheck = Recheck(runner, runs, options.alone, options.jobs)
        recheck(differences)
    report(runner, modes, runs, differences, recheck, options.jobs)
    index = runner.write_index()
    table = ", ".join(f"{runs[mode].stem}.xml" for mode in modes)
    reruns = len(runner.runs) - len(modes)
    print(f"\nThe table came from {table} (outputs: the same names, .out) in {scratch}"
          + (f"; {reruns} reruns have their own numbered files" if reruns else "")
          + f"; {index.name} there lists every run and its command")  # fmt: skip
    total = time.perf_counter() - started
    cpu = sum(run.cpu for run in runner.runs)
    print(f"harness: {total:.0f} s wall in all ({table_wall:.0f} s for the table's runs,"
          f" {total - table_wall:.0f} s rechecking), {len(runner.runs)} runs, {cpu:.0f} s CPU,"
          f" up to {options.jobs} at once")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
