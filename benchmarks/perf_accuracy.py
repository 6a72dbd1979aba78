"""Accuracy of `latency`: its median next to torch.utils.benchmark's on the same models.

For each model, both tools measure in turn, several rounds interleaved so that drift
hits both alike; the table shows each tool's median of medians, their ratio, and the
spread of each tool's medians across rounds (max/min - 1). Same thread count for both.

    python benchmarks/perf_accuracy.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _harness import figure
from torch.utils import benchmark

from pytest_torch.perf import measure_latency
from pytest_torch.perf.engines.wall.timing import fmt_ms


def models():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).eval()
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    ).eval()
    yield "tiny MLP, batch 1", mlp, torch.randn(1, 64)
    yield "tiny MLP, batch 32", mlp, torch.randn(32, 64)
    yield "small conv net, 8x3x32x32", conv, torch.randn(8, 3, 32, 32)


def reference_ms(model, x) -> float:
    timer = benchmark.Timer(
        stmt="model(x)",
        globals={"model": model, "x": x},
        num_threads=torch.get_num_threads(),
    )
    with torch.inference_mode():
        measurement = timer.adaptive_autorange(threshold=0.05, max_run_time=1.0)
    return measurement.median * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    print(f"latency accuracy: {rounds} interleaved rounds, {torch.get_num_threads()} threads")
    header = (
        f"{'model':<26} {'latency':>10} {'utils.benchmark':>16} {'ratio':>7}"
        f" {'spread ours':>12} {'spread ref':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, model, x in models():
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(measure_latency(model, x).median)
            theirs.append(reference_ms(model, x))
        a, b = statistics.median(ours), statistics.median(theirs)
        spread_ours = 100 * (max(ours) / min(ours) - 1)
        spread_ref = 100 * (max(theirs) / min(theirs) - 1)
        print(
            f"{name:<26} {fmt_ms(a):>10} {fmt_ms(b):>16} {a / b:>7.3f}"
            f" {spread_ours:>11.1f}% {spread_ref:>10.1f}%"
        )
        figure(f"latency median / torch.utils.benchmark: {name}", f"{a / b:.3f}",
               "0.90 to 1.10", 0.9 <= a / b <= 1.1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
