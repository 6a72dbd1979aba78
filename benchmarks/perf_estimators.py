"""Which statistic of a measurement separates a real slowdown from interference best?

The same models are measured (``measure_latency`` on one thread, as the plugin does) in
fresh processes under five conditions, several rounds interleaved:

- idle, twice (the reference, and a second process: how far apart two quiet processes
  are);
- two CPU hogs beside it (``python -c "while True: pass"`` twice);
- a twin process measuring the same models at the same time (what ``-n 2`` does);
- idle with every model doing 1.5x the work (a real slowdown).

For each statistic (median, p10, min), of every sample (what a plain timer sees) and of
the undisturbed samples the engine keeps, the worst interference ratio (any condition
but the slowdown, over the reference; and among the measurements the checks would
judge, those not busy) and the smallest slowdown ratio are printed, against the
statistic's median over the idle rounds. A statistic separates well when the first
stays far below the default limit (1.3, tolerance 0.3) and the second far above it; the
margin is their quotient. The regression checks compare the statistic with the largest
margin.

    python benchmarks/perf_estimators.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from _harness import figure, two_cpu_hogs

STATISTICS = ("median", "p10", "min")
SIZES = [(64, 64, 1), (128, 256, 32), (256, 512, 128), (512, 1024, 128), (1024, 1024, 192)]

WORKER = """
import json, sys
import torch
from pytest_torch.perf import measure_latency
from pytest_torch.perf.engines.wall.timing import LatencyResult, SamplingSettings

units = float(sys.argv[1])
sizes = json.loads(sys.argv[2])
STATISTICS = json.loads(sys.argv[3])
out = {}
for width, hidden, batch in sizes:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, width)).eval()
    x = torch.randn(batch, width)

    def work():
        for _ in range(int(units)):
            model(x)

    with torch.inference_mode():
        result = measure_latency(work, threads=1, settings=SamplingSettings(max_time=0.5))
    # every sample, as a plain timer would see them, and the undisturbed ones kept
    raw = LatencyResult(tuple(sorted(result.samples_ms + result.set_aside_ms)), 0, 0, 1, "", 1, "")
    figures = {f"{name} kept": result.stat(name) for name in STATISTICS}
    figures.update({f"{name} all": raw.stat(name) for name in STATISTICS})
    out[f"{width}-{hidden}-{batch}"] = {**figures, "busy": result.busy}
print("RESULT " + json.dumps(out))
"""


def worker(units: int, *, twin: bool = False) -> dict[str, dict[str, float]]:
    command = [
        sys.executable, "-c", WORKER, str(units), json.dumps(SIZES), json.dumps(STATISTICS)
    ]  # fmt: skip
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True)]
    if twin:
        processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate()[0] for p in processes]
    line = next(line for line in outputs[0].splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def with_hogs(units: int) -> dict[str, dict[str, float]]:
    with two_cpu_hogs():
        return worker(units)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    conditions = {
        "idle": lambda: worker(2),
        "idle, another process": lambda: worker(2),
        "two CPU hogs": lambda: with_hogs(2),
        "twin process (-n 2)": lambda: worker(2, twin=True),
        "1.5x the work": lambda: worker(3),
    }
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in conditions}
    for index in range(rounds):
        for name, measure in conditions.items():
            runs[name].append(measure())
        print(f"round {index + 1}/{rounds} done", flush=True)
    models = [f"{w}-{h}-{b}" for w, h, b in SIZES]
    margins = {}
    print(
        f"{'statistic':<14} {'worst interference':>19} {'where':<34}"
        f" {'judged (not busy)':>18} {'smallest slowdown':>18}  margin"
    )
    for samples in ("all", "kept"):
        for stat in STATISTICS:
            key = f"{stat} {samples}"
            worst, where, judged, smallest = 0.0, "", 0.0, float("inf")
            for model in models:
                # the reference: the statistic's median over the idle rounds (one idle
                # measurement alone may come from a moment the host was slow)
                reference = statistics.median(r[model][key] for r in runs["idle"])
                for i in range(rounds):
                    for name in ("idle, another process", "two CPU hogs", "twin process (-n 2)"):
                        figures = runs[name][i][model]
                        ratio = figures[key] / reference
                        if ratio > worst:
                            worst, where = ratio, f"{name}, {model}"
                        if not figures["busy"]:
                            judged = max(judged, ratio)
                    smallest = min(smallest, runs["1.5x the work"][i][model][key] / reference)
            margins[key] = smallest / worst
            print(
                f"{key:<14} {worst:>18.2f}x {where:<34} {judged:>17.2f}x {smallest:>17.2f}x"
                f"  {margins[key]:.2f}"
            )
            figure(f"{key} samples: worst interference / smallest 1.5x slowdown",
                   f"{worst:.2f}x / {smallest:.2f}x", "< 1.3x / > 1.3x", None)  # fmt: skip
            if samples == "kept":
                figure(f"{key} samples: worst interference judged (not busy) / 1.5x slowdown",
                       f"{judged:.2f}x / {smallest:.2f}x", "< 1.3x / > 1.3x",
                       judged < 1.3 < smallest)  # fmt: skip
    best = max(STATISTICS, key=lambda stat: margins[f"{stat} kept"])
    from pytest_torch.perf.engines.wall.recording import REGRESSION_STAT

    figure("statistic of the kept samples with the largest margin (what regressions compare)",
           best, REGRESSION_STAT, best == REGRESSION_STAT)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
