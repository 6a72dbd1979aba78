"""Cost of one `latency` call: wall seconds spent measuring a ~1 ms model, and what the
interference monitor (a reading between every two samples) adds per sample, measured
with and without it in turn.

python benchmarks/perf_cost.py [--calls 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _harness import figure

from pytest_torch.core.devices import Stopwatch
from pytest_torch.perf import measure_latency
from pytest_torch.perf.calls import torch_threads
from pytest_torch.perf.engines.wall.contention import Monitor
from pytest_torch.perf.engines.wall.machine_probes import wait_probe
from pytest_torch.perf.engines.wall.timing import measure


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
    per_sample: dict[str, list[float]] = {"without": [], "with": []}
    with torch_threads(1), torch.inference_mode():
        for _ in range(calls):
            for name in per_sample:
                monitor = Monitor(wait_probe("cpu", 1)) if name == "with" else None
                start = time.perf_counter()
                result = measure(
                    lambda: model(x), timer=Stopwatch("cpu"), device="cpu", threads=1,
                    monitor=monitor,
                )  # fmt: skip
                samples = result.runs + len(result.set_aside_ms)
                per_sample[name].append((time.perf_counter() - start) / samples)
    without, with_monitor = (statistics.median(per_sample[n]) for n in ("without", "with"))
    print(
        f"wall time per sample (warm-up included): {1e3 * without:.3f} ms without the monitor,"
        f" {1e3 * with_monitor:.3f} ms with it"
    )
    figure("interference monitor: wall time per sample, with / without",
           f"{with_monitor / without:.2f}x", "-", None)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
