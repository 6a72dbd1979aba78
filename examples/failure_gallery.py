"""Show the failure reports of the plugins on tests that fail on purpose.

Exits 0 when every gallery test failed with the expected report, 1 otherwise, so the
demo stays a check that the reports really look like this.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXPECTED: list[str | tuple[str, ...]] = [
    # each line (or one of each tuple's lines) must appear in the output
    "Tensors are not close at output['net.0.bias']",
    "9 failed",
    # on a machine too busy for a latency verdict, --torch-perf-strict fails the test with
    # the figures that show it, instead of skipping it
    ("latency budget exceeded: median", "not judged: machine busy"),
    "expected no host-device synchronisation, found 3 synchronising operations:",
    "boolean mask indexing [cpu] at failure_gallery/gallery_failures.py:",
    "This test ran with seed",
    "NaN/Inf disagreements (1):",
    "1 of 6 compared tensors differ.",
    "peak memory on cpu was",
    "largest blocks alive at the peak:",
    "not deterministic: run 2 of 5 differs from run 1",
    "Randomness-driven: the variance disappears when the RNG is reseeded before each run.",
    "First divergence: `dropout` (Dropout)",
    "expected CheckedRegressor.forward to compile with no graph break;"
    " torch.compile broke it 2 times",
    "fix: a Python `if`/`while` on a tensor's value cannot be traced: make it branchless",
    "guard failed: tensor 'features' size mismatch at index 0. expected 8, actual 16",
]


def main() -> int:
    print("=" * 30, "failure gallery: these tests fail on purpose", "=" * 30, flush=True)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "torch_core",
            "--no-header",
            "-q",
            "-rN",
            # the reports are in the error messages: the test's source adds nothing
            "--tb=short",
            "-o",
            "addopts=",
            "--torch-perf-strict",
            "failure_gallery/gallery_failures.py",
            *sys.argv[1:],
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    print(result.stdout, result.stderr, sep="", flush=True)
    expected = list(EXPECTED)
    if any(arg.startswith("--torch-failure-artifacts") for arg in sys.argv[1:]):
        expected.append("failure artifacts (heatmaps, tensors): failure-artifacts/")
    missing = [
        line
        for line in expected
        if not any(part in result.stdout for part in ((line,) if isinstance(line, str) else line))
    ]
    if result.returncode != 1 or missing:
        print(f"failure gallery: unexpected result (exit {result.returncode}); missing: {missing}")
        return 1
    print("failure gallery: every test failed with the expected report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
