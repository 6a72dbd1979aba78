"""Instruction counts (--torch-perf-measure=instructions): how steady, how sensitive,
how deaf to machine load, and what the mode costs.

    python benchmarks/instruction_counts.py [--sessions 10] [--hogs 4] [--skip-cost | --only-cost]
        [--save counts.json | --load counts.json]

1. Cost: the example suite's perf tests (tests/test_performance.py and the benchmark
   suites: the MLP regressor, the classifier, the transformer block) in this mode on two
   xdist workers (counts do not mind them), recorded with torch.compile's cache empty,
   then compared; wall time, start-up and per-test cost (goal: <= 5 min).
2. Steadiness: ``--sessions`` pytest sessions, each its own Valgrind process, count the
   shipped example models and two workloads at four sizes: ``steps``, 100 calls of the
   MLP regressor at batch 1 (mostly Python and dispatch), and 102, 105 and 110 calls
   (exactly 1.02x, 1.05x and 1.1x the work); ``batch``, the classifier at batch 50
   (mostly kernels), and at batch 51, 53 and 55 (1.02x, 1.06x, 1.1x the kernels' work,
   a little less in all); ``windows``, 100 rounds of a tokenizer's windows (ids from a
   vocabulary built on the fly, slices, joined text, a tensor each: allocation-heavy
   Python, where glibc's allocator's part moves between processes), after a test that
   keeps every third of 30,000 buffers, and 102, 105 and 110 rounds. Counts come from
   the baseline files the sessions write.
   The sessions differ as users' runs do: serial in file order, on two xdist workers,
   and in a random order (pytest-randomly), in turn.
   Spread per model: (largest - smallest) / smallest (goal <= 0.2 %), and how much the
   part the Python interpreter counted moved, and how much of the default limit's margin
   the largest difference between two sessions used.
3. Verdicts: every session's counts judged against every other session's smallest size
   with the product's comparison and its defaults: the same size must never fail, more
   work should (goal: 100 %; Python-heavy code has a wider limit, see rule.py).
4. ``--busy-sessions`` sessions beside ``--hogs`` CPU hogs, judged among themselves and
   against an idle session's baseline: the verdicts must be the same as idle (all right).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import figure

from pytest_torch.perf.engines.instructions.counting import Counted
from pytest_torch.perf.engines.instructions.entry import InstructionBaseline
from pytest_torch.perf.engines.instructions.judging import allowed_slack, compare
from pytest_torch.perf.rule import DEFAULT_INSTRUCTION_SLACK, DEFAULT_INSTRUCTION_TOLERANCE

REPO = Path(__file__).resolve().parents[1]
#: workload -> its sizes, the first the baseline's
SIZES = {
    "steps": (100, 102, 105, 110),
    "batch": (50, 51, 53, 55),
    "windows": (100, 102, 105, 110),
}
SUITE = """
import random

import pytest
import torch
from models import MLPRegressor, TinyCNN, TransformerBlock

torch.manual_seed(0)
MODELS = {
    "mlp_regressor": (MLPRegressor(), (64, 16)),
    "classifier": (TinyCNN(), (8, 1, 28, 28)),
    "transformer_block": (TransformerBlock(), (8, 64, 64)),
}
STEP_MODEL, STEP_INPUT = MLPRegressor().eval(), torch.randn(1, 16)
CLASSIFIER = TinyCNN().eval()
_RNG = random.Random(0)
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "zu", "an", "el", "or"]
_WORDS = [
    "".join(_RNG.choice(_SYLLABLES) for _ in range(_RNG.randint(1, 4))).capitalize()
    for _ in range(2000)
]
DOCUMENT = " ".join(_RNG.choice(_WORDS) for _ in range(48)) + "."
KEPT = []


def windows(rounds, stride=16):
    index = {}
    out, texts = [], []
    for r in range(rounds):
        words = DOCUMENT.lower().replace(".", " .").split()
        ids = [index.setdefault(word, len(index) + 3) for word in words]
        for start in range(0, len(ids), stride):
            size = 24 + (start * 7 + r) %% 120
            texts.append(" ".join(words[start:start + size]))
            out.append(torch.tensor([1] + ids[start:start + size] + [2]))
    return out, texts


def test_allocations_before():
    # an earlier test that keeps every third of many buffers: the heap has history
    made = [bytearray(64 + (i * 37) %% 2000) for i in range(30000)]
    KEPT.extend(made[::3])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model(perf_baseline, name):
    model, shape = MODELS[name]
    perf_baseline(model.eval(), torch.randn(*shape, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("calls", %(steps)r)
def test_steps(perf_baseline, calls):
    def steps():
        with torch.inference_mode():
            for _ in range(calls):
                STEP_MODEL(STEP_INPUT)

    perf_baseline(steps)


@pytest.mark.parametrize("size", %(batch)r)
def test_batch(perf_baseline, size):
    images = torch.randn(size, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    perf_baseline(CLASSIFIER, images)


@pytest.mark.parametrize("rounds", %(windows)r)
def test_windows(perf_baseline, rounds):
    perf_baseline(windows, rounds)
"""


def hogs(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


#: how the sessions run, in turn: what differs between users' runs of one suite
HISTORIES = (
    ("serial", ["-p", "no:randomly"]),
    ("xdist -n 2", ["-p", "no:randomly", "-p", "xdist", "-n", "2"]),
    ("random order", ["-p", "randomly", "--randomly-seed={index}"]),
)


def session_counts(root: Path, index: int) -> dict[str, list[int]]:
    """One pytest session counting the suite; label -> [instructions per call, of them
    in the Python interpreter, of them in glibc's allocator]."""
    history = [arg.format(index=index) for arg in HISTORIES[index % len(HISTORIES)][1]]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *history,
         "--torch-perf-measure=instructions", "--torch-update-perf",
         f"--torch-perf-baselines=session-{index}.json", "test_counts.py"],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"session failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    document = json.loads((root / f"session-{index}.json").read_text())
    ((_, tests),) = document["instructions"].items()
    return {
        label.split("::", 1)[1]: [
            entry["instructions"],
            entry.get("interpreter", 0),
            entry.get("allocator", 0),
        ]
        for label, entry in tests.items()
    }


Verdicts = dict[str, list[bool]]


def _baseline(counts: list[int]) -> InstructionBaseline:
    """[instructions, of them the interpreter's, the allocator's] as the baseline the
    product compares with."""
    allocator = counts[2] if len(counts) > 2 else 0  # counts saved before it was kept
    return InstructionBaseline(counts[0], 0.0, 5, "-", interpreter=counts[1], allocator=allocator)


def _fails(baseline: InstructionBaseline, instructions: int) -> bool:
    """Whether the product's comparison, with its defaults, fails ``instructions``."""
    outcome = compare(
        "-", baseline, lambda: Counted(instructions, [instructions], 2), key="-",
        tolerance=DEFAULT_INSTRUCTION_TOLERANCE, slack=DEFAULT_INSTRUCTION_SLACK, rerecord="-",
    )  # fmt: skip
    return outcome.status == "fail"


def judged(sessions: list[dict[str, list[int]]]) -> Verdicts:
    """Per case ("steps[102]", "model[classifier]"): whether each (baseline session,
    other session) pair fails. A workload's sizes are judged against its first size's
    baseline; the example models, unchanged, against themselves (only a false failure
    is possible there)."""
    cases = [
        (f"{workload}[{size}]", f"test_{workload}[{sizes[0]}]", f"test_{workload}[{size}]")
        for workload, sizes in SIZES.items()
        for size in sizes
    ] + [(label[5:], label, label) for label in sessions[0] if label.startswith("test_model")]
    verdicts: Verdicts = {}
    for case, recorded, counted in cases:
        verdicts[case] = [
            _fails(_baseline(before[recorded]), now[counted][0])
            for i, before in enumerate(sessions)
            for j, now in enumerate(sessions)
            if i != j
        ]
    return verdicts


def _same_work(case: str) -> bool:
    return case.startswith("model[") or any(
        case == f"{workload}[{sizes[0]}]" for workload, sizes in SIZES.items()
    )


def suite_cost() -> None:
    """The example suite's perf tests in this mode: record, then compare."""
    root = Path(tempfile.mkdtemp(prefix="instructions-examples-"))
    shutil.copytree(REPO / "examples", root / "examples")
    args = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "2",
            "tests/test_performance.py", "tests/test_benchmarks.py", "--torch-benchmark",
            "--torch-perf-measure=instructions", "--durations=0", "-q"]  # fmt: skip
    started = time.perf_counter()
    subprocess.run([*args, "-k", "no_such_test"], cwd=root / "examples", capture_output=True)
    took = time.perf_counter() - started
    print(f"start-up (Valgrind, Python, torch, collection; -n 2): {took:.0f} s")
    # the first run compiles the compile-mode cases from an empty cache, as a CI job would
    # (it lives in the project's pytest cache: this copy's, empty until the first run)
    shutil.rmtree(root / "examples" / ".pytest_cache", ignore_errors=True)
    for what, extra in (
        ("record, -n 2, torch.compile's cache empty", ["--torch-update-perf"]),
        ("compare, -n 2, torch.compile's cache kept", []),
    ):
        started = time.perf_counter()
        result = subprocess.run(
            [*args, *extra], cwd=root / "examples", capture_output=True, text=True
        )
        wall = time.perf_counter() - started
        durations = [
            (float(m.group(1)), m.group(2), m.group(3))
            for m in re.finditer(r"^([\d.]+)s (call|setup|teardown) +(\S+)", result.stdout, re.M)
        ]
        in_tests = sum(seconds for seconds, _, _ in durations)
        summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "?"
        print(f"\nexample perf tests, {what}: {wall:.0f} s wall ({summary})")
        print(f"  the tests' own time, both workers together: {in_tests:.0f} s")
        for seconds, when, test in sorted(durations, reverse=True)[:25]:
            if when == "call" and seconds >= 0.5:
                print(f"  {seconds:7.1f} s  {test}")
        figure(f"example perf tests, {what}", f"{wall:.0f} s", "<= 300 s", wall <= 300)


def collect(options: argparse.Namespace) -> dict[str, list[dict[str, list[int]]]]:
    """condition -> its sessions' counts."""
    root = Path(tempfile.mkdtemp(prefix="instructions-bench-"))
    (root / "test_counts.py").write_text(SUITE % SIZES)
    shutil.copy(REPO / "examples" / "models.py", root / "models.py")
    (root / "pytest.ini").write_text("[pytest]\n")
    runs: dict[str, list[dict[str, list[int]]]] = {}
    conditions = (
        ("idle", 0, options.sessions),
        (f"beside {options.hogs} CPU hogs", options.hogs, options.busy_sessions),
    )
    for condition, hog_count, sessions in conditions:
        started = time.perf_counter()
        running = hogs(hog_count)
        try:
            runs[condition] = [session_counts(root, i) for i in range(sessions)]
        finally:
            for hog in running:
                hog.kill()
        print(f"\n{condition}: {sessions} sessions in {time.perf_counter() - started:.0f} s")
    return runs


def steadiness(condition: str, sessions: list[dict[str, list[int]]]) -> None:
    print(f"\n{condition}: {len(sessions)} sessions ({', '.join(h for h, _ in HISTORIES)} in turn)")
    for label in sorted(sessions[0]):
        values = [counts[label][0] for counts in sessions]
        python = [counts[label][1] for counts in sessions]
        spread = (max(values) - min(values)) / min(values)
        # the most one session counted above another, as a share of the interpreter's part
        moved = max(
            (now[label][0] - before[label][0]) / before[label][1]
            for before in sessions
            for now in sessions
            if before[label][1]
        )
        share = statistics.median(python) / statistics.median(values)
        print(
            f"  {label:32} median {statistics.median(values):>12,.0f}"
            f"  spread {100 * spread:6.3f} %  interpreter {share:4.0%}"
            f"  most above another: {100 * moved:5.2f} % of the interpreter's part"
        )
        if label.startswith("test_model"):
            figure(f"{condition}: spread {label}", f"{100 * spread:.3f} %", "<= 0.2 %",
                   spread <= 0.002)  # fmt: skip
        if _same_work(label[5:]):
            # the most one session counted above another, as a share of what the
            # default limit allows above a baseline: over 100 % is a false failure
            used = max(
                (now[label][0] - before[label][0])
                / (
                    DEFAULT_INSTRUCTION_TOLERANCE * before[label][0]
                    + allowed_slack(_baseline(before[label]), DEFAULT_INSTRUCTION_SLACK)
                )
                for before in sessions
                for now in sessions
            )
            figure(f"{condition}: {label}, most above another session, of the limit's margin",
                   f"{100 * used:.0f} %", "< 100 %", used < 1)  # fmt: skip
    for workload, sizes in SIZES.items():
        base = statistics.median(c[f"test_{workload}[{sizes[0]}]"][0] for c in sessions)
        for size in sizes[1:]:
            now = statistics.median(c[f"test_{workload}[{size}]"][0] for c in sessions)
            print(f"  {workload} {size} against {sizes[0]}: {size / sizes[0]:.2f}x the size,"
                  f" {now / base:.4f}x the instructions (medians)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--hogs", type=int, default=4)
    parser.add_argument("--busy-sessions", type=int, default=3, help="sessions beside the hogs")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--only-cost", action="store_true", help="measure the cost, nothing else")
    parser.add_argument("--save", type=Path, help="write the sessions' counts here")
    parser.add_argument("--load", type=Path, help="judge counts saved by --save; count nothing")
    options = parser.parse_args()
    if options.load:
        runs = json.loads(options.load.read_text())
    else:
        if shutil.which("valgrind") is None:
            print("Valgrind is not installed: apt-get install valgrind")
            return 1
        if not options.skip_cost:
            suite_cost()
        if options.only_cost:
            return 0
        runs = collect(options)
        if options.save:
            options.save.write_text(json.dumps(runs, indent=1))
    for condition, sessions in runs.items():
        steadiness(condition, sessions)
    verdicts = {condition: judged(sessions) for condition, sessions in runs.items()}
    idle_runs, busy_runs = runs.values()
    # a baseline recorded idle, compared beside the hogs: what CI on a busy runner sees
    crossed = judged([*idle_runs[:1], *busy_runs])
    verdicts["idle baseline, busy runs"] = {
        case: failed[: len(busy_runs)] for case, failed in crossed.items()
    }
    print()
    right = True
    for condition, by_case in verdicts.items():
        for case, failed in by_case.items():
            rate = sum(failed) / len(failed)
            same_size = _same_work(case)
            goal = "0 %" if same_size else "100 %"
            met = rate == 0 if same_size else rate == 1
            right = right and met
            figure(f"{condition}: {case} fails ({len(failed)} pairs)", f"{100 * rate:.0f} %",
                   goal, met)  # fmt: skip
    false_failures = sum(
        sum(failed)
        for by_case in verdicts.values()
        for case, failed in by_case.items()
        if _same_work(case)
    )
    figure("false failures, all conditions", str(false_failures), "0", false_failures == 0)
    figure("every verdict right, idle and busy", str(right), "True", right)
    rates = [
        {case: sum(failed) / len(failed) for case, failed in by_case.items()}
        for by_case in verdicts.values()
    ]
    same = all(rate == rates[0] for rate in rates)
    figure("the same verdicts idle, busy, and idle baseline with busy runs", str(same), "True",
           same)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
