"""CPU peak memory: accuracy on known allocations, and what tracking costs.

python benchmarks/memory_cost.py [--repeats 30]

- accuracy: a tensor of N MiB allocated in a window must report N MiB (goal: within 1 %);
- marginal cost: a model's forward pass with CPU tracking on vs off, interleaved, one
  intra-op thread (goal: tracked <= 1.5x untracked);
- fixed cost: opening and closing one window (census of live tensors + profiler start
  and stop), in this process and with the heap of a typical pytest process.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

from pytest_torch.core.cpu_memory import CpuAllocationRecorder
from pytest_torch.core.peaks import PeakTracker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _harness import figure
from models import MLPRegressor, TinyCNN, TransformerBlock

MIB = 2**20


def accuracy() -> None:
    print("accuracy: a known allocation inside a window")
    print(f"  {'allocated':>10}  {'reported':>10}  {'error':>8}")
    worst = 0.0
    for mb in (1, 10, 100, 500):
        with PeakTracker(["cpu"]) as tracker:
            block = torch.empty(mb * MIB, dtype=torch.uint8)
            del block
        added = tracker.results["cpu"].added / MIB
        print(f"  {mb:>6} MiB  {added:>6.2f} MiB  {100 * (added - mb) / mb:>+7.3f} %")
        worst = max(worst, abs(added - mb) / mb)
    figure("CPU peak accuracy, 1 to 500 MiB allocations (worst error)", f"{100 * worst:.3f} %",
           "<= 1 %", worst <= 0.01)  # fmt: skip


def forward_cost(repeats: int) -> None:
    torch.set_num_threads(1)
    cases = {
        "MLPRegressor, batch 64": (MLPRegressor().eval(), torch.randn(64, 16)),
        "TinyCNN, batch 64": (TinyCNN().eval(), torch.randn(64, 1, 28, 28)),
        "TransformerBlock, 8 x 32 tokens": (TransformerBlock().eval(), torch.randn(8, 32, 64)),
    }
    print("marginal cost: one forward pass with CPU tracking on vs off (1 thread)")
    print(f"  {'model':<32}  {'off':>9}  {'on':>9}  {'ratio':>6}")
    for name, (model, x) in cases.items():
        calls = max(1, int(0.02 / _time_once(model, x)))  # ~20 ms per sample
        off, on = [], []
        with torch.no_grad():
            for _ in range(repeats):  # interleaved: drift hits both alike
                off.append(_time_calls(model, x, calls, tracked=False))
                on.append(_time_calls(model, x, calls, tracked=True))
        base, tracked = statistics.median(off), statistics.median(on)
        ratio = tracked / base
        print(f"  {name:<32}  {base * 1e3:>6.3f} ms  {tracked * 1e3:>6.3f} ms  {ratio:>5.2f}x")
        figure(f"CPU peak tracking overhead: {name}", f"{ratio:.2f}x", "<= 1.5x", ratio <= 1.5)


def _time_once(model: torch.nn.Module, x: torch.Tensor) -> float:
    with torch.no_grad():
        for _ in range(3):
            model(x)
        start = time.perf_counter()
        model(x)
    return time.perf_counter() - start


def _time_calls(model: torch.nn.Module, x: torch.Tensor, calls: int, tracked: bool) -> float:
    recorder = CpuAllocationRecorder()
    if tracked:
        recorder.start()
    start = time.perf_counter()
    for _ in range(calls):
        model(x)
    elapsed = time.perf_counter() - start
    recorder.stop()
    return elapsed / calls


def window_cost(repeats: int) -> None:
    print("fixed cost: opening and closing one window")
    for label in ("this process", "with a pytest process's heap"):
        if label != "this process":
            import pytest  # noqa: F401
            import torch._dynamo

            torch._dynamo.list_backends()
        gc.collect()
        walls = []
        for _ in range(repeats):
            start = time.perf_counter()
            with PeakTracker(["cpu"]):
                pass
            walls.append(time.perf_counter() - start)
        objects = len(gc.get_objects())
        print(f"  {label:<30} {objects:>8} objects: median {statistics.median(walls) * 1e3:.1f} ms")
        figure(f"CPU peak window open+close, {label}", f"{statistics.median(walls) * 1e3:.1f} ms",
               "-", None)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    repeats = parser.parse_args().repeats
    torch.manual_seed(0)
    accuracy()
    forward_cost(repeats)
    window_cost(max(5, repeats // 3))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
