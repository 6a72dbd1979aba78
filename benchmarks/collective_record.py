"""What recording each rank's collectives costs, side by side with the record off.

    python benchmarks/collective_record.py [--pairs 3] [--calls 2000]

pytest-torch-distributed reads each rank's collectives from torch's Flight Recorder,
which torch keeps on by default (a ring of 2000 entries, with each call's Python
stack). The record's cost is therefore the recorder's cost on every collective, plus
the plugin's reads of it: a read without stacks each second while a test runs longer
than 2 s (for the early stop of ranks that all wait in vain), and one with stacks when
a test ends badly.

Worlds started in pairs, one with the recorder as torch ships it and one with
``TORCH_FR_BUFFER_SIZE=0``, alternated --pairs times; medians over the pairs:

- a one-rank world: 20000 all_reduces of float32[4], which never wait for a peer, so
  what is timed is the call itself, the recorder's entry included: the recorder's
  cost per collective, free of the scheduling noise of two ranks on a small machine;
- a two-rank world, for scale: --calls all_reduces of float32[4] (a round trip between
  processes), then 200 DDP steps of a 256x256 linear model (an all_reduce in backward).

Then, with the recorder on, the plugin's reads after --calls collectives: without
stacks, and with stacks (as when a test fails).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import figure

WORKER = r"""
import json, os, sys, time
import torch
import torch.distributed as dist
import torch.nn as nn

calls = int(sys.argv[1])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
since = time.time_ns()
t = torch.ones(4)
for _ in range(200):
    dist.all_reduce(t)
if dist.get_world_size() == 1:
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t)
    print("RESULT " + json.dumps({"reduce_us": (time.perf_counter() - start) / calls * 1e6}))
    sys.exit(0)
dist.barrier()
start = time.perf_counter()
for _ in range(calls):
    dist.all_reduce(t)
reduce_us = (time.perf_counter() - start) / calls * 1e6
model = nn.parallel.DistributedDataParallel(nn.Linear(256, 256))
x = torch.randn(32, 256)
for _ in range(20):
    model(x).sum().backward()
dist.barrier()
start = time.perf_counter()
for _ in range(200):
    model(x).sum().backward()
step_us = (time.perf_counter() - start) / 200 * 1e6
reads = {}
if os.environ.get("TORCH_FR_BUFFER_SIZE") != "0":
    from pytest_torch.distributed.flight import snapshot
    for name, stacks in (("plain", False), ("stacks_first", True), ("stacks_again", True)):
        start = time.perf_counter()
        record = snapshot(rank, since, stacks, "gloo")
        reads[name] = (time.perf_counter() - start) * 1e3
    reads["calls_kept"] = len(record.calls)
dist.destroy_process_group()
if rank == 0:
    print("RESULT " + json.dumps({"reduce_us": reduce_us, "step_us": step_us, "reads": reads}))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def world(calls: int, recorder: bool, size: int = 2) -> dict[str, object]:
    """One world's figures (rank 0's)."""
    port = str(_free_port())
    procs = []
    for rank in range(size):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        if not recorder:
            env["TORCH_FR_BUFFER_SIZE"] = "0"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(calls)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        )
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    for line in outputs[0].splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"the world gave no result: {outputs}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    options = parser.parse_args()
    on: list[dict[str, object]] = []
    off: list[dict[str, object]] = []
    alone_on: list[dict[str, object]] = []
    alone_off: list[dict[str, object]] = []
    for _ in range(options.pairs):
        alone_on.append(world(20000, recorder=True, size=1))
        alone_off.append(world(20000, recorder=False, size=1))
        on.append(world(options.calls, recorder=True))
        off.append(world(options.calls, recorder=False))

    def median(results: list[dict[str, object]], key: str) -> float:
        return statistics.median(float(r[key]) for r in results)  # type: ignore[arg-type]

    print(f"gloo on this machine, {options.pairs} pairs of worlds, medians:")
    print(f"{'':34}{'recorder on':>13}{'recorder off':>14}{'extra':>10}{'ratio':>8}")
    rows = (
        (alone_on, alone_off, "reduce_us", "1 rank: all_reduce [4] (us)"),
        (on, off, "reduce_us", "2 ranks: all_reduce [4] (us)"),
        (on, off, "step_us", "2 ranks: DDP step (us)"),
    )
    extra = {}
    for with_, without, key, label in rows:
        a, b = median(with_, key), median(without, key)
        extra[label] = a - b
        print(f"{label:34}{a:13.1f}{b:14.1f}{a - b:+10.1f}{a / b:8.3f}")
    per_call = extra["1 rank: all_reduce [4] (us)"]
    round_trip = median(off, "reduce_us")
    reads = [r["reads"] for r in on]
    for name, label in (
        ("plain", "a read without stacks (ms)"),
        ("stacks_first", "the first read with stacks (ms)"),
        ("stacks_again", "a later read with stacks (ms)"),
    ):
        value = statistics.median(float(r[name]) for r in reads)  # type: ignore[index]
        print(f"{label:32}{value:14.1f}")
    kept = reads[0]["calls_kept"]  # type: ignore[index]
    print(f"(the recorder kept {kept} calls of the last test's collectives)")
    share = per_call / round_trip * 100
    print(
        f"the recorder adds {per_call:.1f} us to a collective: {share:.1f} % of a two-rank"
        f" all_reduce's {round_trip:.0f} us round trip here"
    )
    figure("recorder cost per collective", f"{per_call:.1f} us", "< 20 us", per_call < 20)
    figure("share of a 2-rank all_reduce", f"{share:.1f} %", "< 2 %", share < 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
