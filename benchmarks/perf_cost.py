"""Cost of one `latency` call: wall seconds spent measuring a ~1 ms model.

python benchmarks/perf_cost.py [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _harness import figure

from pytest_torch.perf import measure_latency


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10)
    calls = parser.parse_args().calls
    torch.manual_seed(0)
    # sized to take about a millisecond per forward on a small CPU
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)
    ).eval()
    x = torch.randn(64, 512)
    walls, results = [], []
    for _ in range(calls):
        start = time.perf_counter()
        results.append(measure_latency(model, x))
        walls.append(time.perf_counter() - start)
    forward = statistics.median(r.median for r in results)
    print(f"latency cost: {calls} calls on a model of {forward:.3f} ms per forward")
    print(
        f"wall time per latency() call: median {statistics.median(walls):.3f} s,"
        f" min {min(walls):.3f} s, max {max(walls):.3f} s"
    )
    figure("wall time of one latency() call, ~1 ms model", f"{statistics.median(walls):.2f} s",
           "-", None)  # fmt: skip
    print(
        f"samples per call: median {statistics.median(r.runs for r in results):.0f},"
        f" stopped by: {sorted({r.stopped_by for r in results})}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
