"""What a leak check costs beyond running the body: check time vs (iterations + 1) x body.

python benchmarks/leak_cost.py [--repeats 15] [--iterations 5]

Each body is timed on its own and inside check_for_leaks, interleaved, in a process
with the heap of a typical pytest run (pytest, torch.compile's machinery loaded).
Goal: a passing check costs at most 1.1x the runs themselves.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest  # noqa: F401  (the heap of a pytest process)
import torch
import torch._dynamo
import torch.nn.functional as F

from pytest_torch.memory.leaks import LeakCheck, check_for_leaks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _harness import figure
from models import MLPRegressor, TinyCNN, train_step


def bodies() -> dict[str, Callable[[], object]]:
    regressor = MLPRegressor()
    adam = torch.optim.Adam(regressor.parameters(), lr=1e-3)
    features = torch.randn(64, 16)
    cnn = TinyCNN()
    sgd = torch.optim.SGD(cnn.parameters(), lr=0.1)
    images, labels = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))

    def cnn_step() -> float:
        sgd.zero_grad()
        loss = F.cross_entropy(cnn(images), labels)
        loss.backward()
        sgd.step()
        return loss.item()

    return {
        "MLP training step (Adam, batch 64)": lambda: train_step(
            regressor, adam, features, features.sum(dim=1)
        ),
        "TinyCNN training step (SGD, batch 32)": cnn_step,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch._dynamo.list_backends()
    gc.collect()
    runs = args.iterations + 1
    print(f"leak check cost: {runs} runs per check, heap of {len(gc.get_objects())} objects")
    print(f"  {'body':<40}  {'body':>9}  {f'{runs} x body':>10}  {'check':>9}  {'ratio':>6}")
    for name, body in bodies().items():
        for _ in range(3):
            body()
        plain, checked = [], []
        for _ in range(args.repeats):  # interleaved: drift hits both alike
            start = time.perf_counter()
            for _ in range(runs):
                body()
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            assert check_for_leaks(body, LeakCheck(args.iterations)) is None
            checked.append(time.perf_counter() - start)
        base, check = statistics.median(plain), statistics.median(checked)
        print(
            f"  {name:<40}  {base / runs * 1e3:>6.2f} ms  {base * 1e3:>7.1f} ms"
            f"  {check * 1e3:>6.1f} ms  {check / base:>5.2f}x"
        )
        figure(f"leak check / {runs} plain runs: {name}", f"{check / base:.2f}x", "<= 1.1x",
               check / base <= 1.1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
