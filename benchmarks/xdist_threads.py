"""pytest-xdist with thread shares: wall time of a compute-heavy suite, side by side.

    python benchmarks/xdist_threads.py [--repeats 3]

1. A suite of 40 matmul/conv tests: serial (torch's default threads), `-n 2` with
   --torch-num-threads=auto (the default: each worker gets its share of the cores) and
   `-n 2 --torch-num-threads=none` (every worker starts a thread per core). The more
   cores, the larger the gap; on 2 cores it is small.
2. A torch-free suite of 200 plain tests under `-n 2`, with and without the plugin:
   the plugin must cost nothing there (goal: ratio <= 1.05, torch never imported).
"""

from __future__ import annotations

import argparse

from _harness import figure, interleaved, make_suite, median, spread

HEAVY = """
import pytest
import torch


@pytest.mark.parametrize("i", range(10))
def test_matmul_{n}(i):
    torch.manual_seed(i)
    a = torch.randn(384, 384)
    for _ in range(30):
        a = torch.tanh(a @ a / 384)


@pytest.mark.parametrize("i", range(10))
def test_conv_{n}(i):
    torch.manual_seed(i)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(8, 16, 48, 48)
    with torch.no_grad():
        for _ in range(6):
            conv(x)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    from pytest_torch.core.cpus import available_cores

    heavy = make_suite({f"test_heavy_{n}.py": HEAVY.format(n=n) for n in range(2)})
    plugins = ["-p", "xdist", "-p", "torch_xdist"]
    results = interleaved(
        heavy,
        {
            "serial": ["-p", "torch_xdist", "-p", "no:xdist"],
            "-n 2, threads auto": [*plugins, "-n", "2"],
            "-n 2, threads none": [*plugins, "-n", "2", "--torch-num-threads=none"],
        },
        repeats,
    )
    print(f"compute-heavy suite: 40 tests, {available_cores()} cores, {repeats} runs each")
    print(f"  {'variant':<22} {'median':>9} {'range':>16}  vs serial")
    serial = median(results["serial"][0])
    for name, (times, _) in results.items():
        ratio = median(times) / serial
        print(f"  {name:<22} {median(times):>8.2f}s {spread(times):>16}  {ratio:.2f}x")
    auto, none = median(results["-n 2, threads auto"][0]), median(results["-n 2, threads none"][0])
    print(f"  threads none / auto under -n 2: {none / auto:.2f}x")
    speedup = serial / auto
    # what -n buys depends on the machine (cores, and how well torch already uses them
    # in one process); the plugin's goal is the next figure: not losing it to threads
    figure(f"xdist speed-up, compute suite, -n 2 auto vs serial ({available_cores()} cores)",
           f"{speedup:.2f}x", "-", None)  # fmt: skip
    figure("xdist: threads none / auto under -n 2 (oversubscription cost)", f"{none / auto:.2f}x",
           ">= 1x", none / auto >= 0.97)  # fmt: skip

    plain = make_suite(
        {
            f"test_plain_{f}.py": "".join(
                f"def test_{i}():\n    assert {i} >= 0\n\n" for i in range(50)
            )
            for f in range(4)
        }
    )
    results = interleaved(
        plain,
        {
            "with torch_xdist": [*plugins, "-n", "2"],
            "without": ["-p", "xdist", "-p", "no:torch_xdist", "-n", "2"],
        },
        repeats + 2,
    )
    print(f"torch-free suite: 200 plain tests under -n 2, {repeats + 2} runs each")
    for name, (times, imported) in results.items():
        print(
            f"  {name:<18} {median(times):>8.3f}s {spread(times):>16}  torch imported: {imported}"
        )
    ratio = median(results["with torch_xdist"][0]) / median(results["without"][0])
    print(f"  ratio with/without: {ratio:.3f} (goal <= 1.05)")
    imported = results["with torch_xdist"][1]
    figure("xdist plugin on a torch-free suite under -n 2: with / without",
           f"{ratio:.3f}x" + (", torch imported" if imported else ""),
           "<= 1.05x, torch not imported", ratio <= 1.05 and not imported)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
