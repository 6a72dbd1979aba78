"""Does a perf suite cry wolf, and does it catch a real slowdown?

Ten perf_baseline tests (models from ~0.05 to ~5 ms) are recorded once, then the suite
is rerun N times at the default tolerance: every failure is a false alarm (goal 0).
Then the same N reruns with every model doing 1.5x the work: every run must fail
every test (goal N/N detections per test).

    python benchmarks/perf_flakiness.py [--reruns 30]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import figure

SUITE = """
import os

import pytest
import torch

# 2 units of work normally; 3 with the injected slowdown: exactly 1.5x
UNITS = 3 if os.environ.get("SLOWDOWN") else 2
SIZES = [(64, 64, 1), (64, 256, 8), (128, 256, 32), (256, 512, 32), (256, 512, 128),
         (512, 1024, 32), (512, 1024, 128), (1024, 1024, 64), (1024, 2048, 64), (1024, 2048, 256)]


@pytest.fixture(autouse=True)
def _fixed_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("width,hidden,batch", SIZES)
def test_model(perf_baseline, width, hidden, batch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, width)).eval()
    x = torch.randn(batch, width)

    def work():
        with torch.inference_mode():
            for _ in range(UNITS):
                model(x)

    perf_baseline(work)
"""


def run(root: Path, *args: str, slow: bool = False) -> tuple[int, int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if slow:
        env["SLOWDOWN"] = "1"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", result.stdout)) else 0
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", result.stdout)) else 0
    return passed, failed, result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reruns", type=int, default=30)
    parser.add_argument("--slack-ms", default=None, help="override --torch-perf-slack-ms")
    options = parser.parse_args()
    reruns = options.reruns
    extra = [] if options.slack_ms is None else [f"--torch-perf-slack-ms={options.slack_ms}"]
    root = Path(tempfile.mkdtemp(prefix="pytest-torch-flaky-"))
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_models.py").write_text(SUITE)
    passed, failed, out = run(root, "--torch-update-perf")
    if passed != 10:
        print(out)
        return 1
    false_alarms, detections, fully_detected = 0, 0, 0
    missed: dict[str, int] = {}
    false_by_test: dict[str, int] = {}
    for index in range(reruns):
        _, failed, out = run(root, *extra)
        for name in re.findall(r"^FAILED \S+::(\S+)", out, re.M):
            false_by_test[name] = false_by_test.get(name, 0) + 1
        false_alarms += failed
        _, failed_slow, out = run(root, *extra, "-rp", slow=True)
        for name in re.findall(r"^PASSED \S+::(\S+)", out, re.M):
            missed[name] = missed.get(name, 0) + 1
        detections += failed_slow
        fully_detected += failed_slow == 10
        print(
            f"rerun {index + 1:>2}: unchanged {failed} false failure(s);"
            f" 1.5x slower {failed_slow}/10 detected",
            flush=True,
        )
    if false_by_test:
        print(f"false failures by test: {false_by_test}")
    if missed:
        print(f"missed detections by test: {missed}")
    print(f"settings: default tolerance 0.3, {extra or 'default slack'}")
    print(f"false failures: {false_alarms} in {reruns * 10} test runs (goal 0)")
    figure(f"perf_baseline false failures, {reruns} reruns x 10 tests, unchanged models",
           str(false_alarms), "0", false_alarms == 0)  # fmt: skip
    caught = f"{fully_detected}/{reruns}"
    figure(f"reruns where all 10 tests caught a 1.5x slowdown ({detections} test runs)",
           caught, f"{reruns}/{reruns}", fully_detected == reruns)  # fmt: skip
    print(
        f"detected 1.5x slowdowns: {detections} of {reruns * 10} test runs;"
        f" runs with every test failing: {fully_detected}/{reruns} (goal {reruns}/{reruns})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
