"""How long diagnose_nondeterminism takes on the example models, and why.

python benchmarks/determinism_cost.py [--repeats 5]

For each model: one forward pass, assert_deterministic (5 runs) and
diagnose_nondeterminism (5 runs per experiment), medians of --repeats, on one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from pytest_torch import assert_deterministic, diagnose_nondeterminism

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _harness import figure
from models import MLPRegressor, TinyCNN, TransformerBlock


def _median_seconds(call: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cases = {
        "MLPRegressor eval, batch 64": (MLPRegressor().eval(), torch.randn(64, 16)),
        "TinyCNN eval, batch 32": (TinyCNN().eval(), torch.randn(32, 1, 28, 28)),
        "TinyCNN train (dropout), batch 32": (TinyCNN().train(), torch.randn(32, 1, 28, 28)),
        "TransformerBlock eval, 8 x 32": (TransformerBlock().eval(), torch.randn(8, 32, 64)),
    }
    print("diagnose_nondeterminism on the example models (1 thread, medians)")
    header = f"  {'model':<36}  {'forward':>9}  {'assert':>9}  {'diagnose':>9}  verdict"
    print(header)
    for name, (model, x) in cases.items():
        forward = _median_seconds(lambda m=model, t=x: m(t), repeats)
        result = diagnose_nondeterminism(model, x)
        asserted = _median_seconds(lambda m=model, t=x: _try_assert(m, t), repeats)
        diagnosed = _median_seconds(lambda m=model, t=x: diagnose_nondeterminism(m, t), repeats)
        runs = sum(trial.runs for trial in result.trials)  # traced runs not counted
        print(
            f"  {name:<36}  {forward * 1e3:>6.2f} ms  {asserted * 1e3:>6.1f} ms"
            f"  {diagnosed * 1e3:>6.1f} ms  {result.category} ({len(result.trials)}"
            f" experiments, {runs} runs)"
        )
        figure(f"diagnose_nondeterminism: {name}", f"{diagnosed * 1e3:.0f} ms ({result.category})",
               "-", None)  # fmt: skip
    return 0


def _try_assert(model: torch.nn.Module, x: torch.Tensor) -> None:
    with contextlib.suppress(AssertionError):  # dropout in train mode fails, as it should
        assert_deterministic(model, x)


if __name__ == "__main__":
    raise SystemExit(main())
