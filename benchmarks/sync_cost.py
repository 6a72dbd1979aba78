"""What assert_no_host_sync costs on a training step, and why it is not built on the profiler.

python benchmarks/sync_cost.py [--repeats 30]

For each workload: the plain call and the call under assert_no_host_sync, alternated
--repeats times on one thread (medians, ratio). Then the profiler (the other way to see
host reads at any depth) on the same step: its cost, and how many host reads it finds
inside CPU kernels of code that does not synchronise on a GPU (linalg.inv_ex, one_hot
with num_classes, an Adam step) — the false alarms a profiler-based check would raise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from pytest_torch import assert_no_host_sync, find_host_syncs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from _harness import figure
from models import MLPRegressor, TransformerBlock


def _paired(
    plain: Callable[[], object], checked: Callable[[], object], repeats: int
) -> tuple[float, float]:
    a, b = [], []
    for _ in range(repeats):
        for call, times in ((plain, a), (checked, b)):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def _training_step() -> Callable[[], object]:
    model = MLPRegressor()
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(64, 16), torch.randn(64)

    def step() -> object:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach()

    return step


def _inference() -> Callable[[], object]:
    model = TransformerBlock().eval()
    x = torch.randn(8, 32, 64)

    def infer() -> object:
        with torch.no_grad():
            return model(x)

    return infer


def _profiled(call: Callable[[], object]) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        call()
    return [event.name for event in prof.events()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    repeats = parser.parse_args().repeats
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("assert_no_host_sync against the plain call (1 thread, medians)")
    print(f"  {'workload':<40}  {'plain':>9}  {'checked':>9}  {'ratio':>6}  {'profiler':>9}")
    for name, step in (
        ("MLPRegressor training step (Adam)", _training_step()),
        ("TransformerBlock inference, 8 x 32", _inference()),
    ):
        step()
        plain, checked = _paired(step, lambda s=step: assert_no_host_sync(s), repeats)
        _, profiled = _paired(step, lambda s=step: _profiled(s), max(3, repeats // 5))
        print(
            f"  {name:<40}  {plain * 1e3:>6.2f} ms  {checked * 1e3:>6.2f} ms"
            f"  {checked / plain:>5.1f}x  {profiled * 1e3:>6.1f} ms"
        )
        figure(f"assert_no_host_sync: {name}", f"{checked / plain:.1f}x the plain call", "-", None)

    step = _training_step()
    step()
    index = torch.randint(0, 10, (32,))
    matrix = torch.eye(4) + 0.1 * torch.randn(4, 4)
    sync_free = {
        "Adam training step": step,
        "one_hot(index, num_classes=10)": lambda: F.one_hot(index, num_classes=10),
        "linalg.inv_ex": lambda: torch.linalg.inv_ex(matrix),
    }
    print("host reads the profiler sees in code that does not sync on a GPU:")
    false_alarms = 0
    for name, call in sync_free.items():
        reads = sum(n == "aten::_local_scalar_dense" for n in _profiled(call))
        found = len(find_host_syncs(call)[1])
        false_alarms += reads
        print(f"  {name:<34} profiler: {reads} host reads   assert_no_host_sync: {found} syncs")
    figure(
        "profiler-based detection: false alarms on sync-free code",
        f"{false_alarms} host reads in 3 sync-free calls",
        "-",
        None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
