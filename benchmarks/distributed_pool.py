"""The distributed plugin's rank pool against hand-rolled multiprocessing, side by side.

    python benchmarks/distributed_pool.py [--tests 50] [--busy]

N two-rank tests (half an all-reduce, half one DDP training step of a small MLP with an
SGD optimizer), the same bodies written four ways, each one pytest run with plugin
autoload off and only the plugins it needs:

1. pool: ``@pytest.mark.torch_distributed(world_size=2)`` with the ``rank`` and
   ``world_size`` fixtures (``-p torch_core -p torch_distributed``);
2. spawn: the way most suites do it today: each test calls
   ``torch.multiprocessing.spawn(..., join=False)`` with a ``file://`` store in its
   ``tmp_path`` and joins with a timeout (every rank imports torch again);
3. fork: each test starts two ``multiprocessing.Process`` (fork) on a free port found per
   test (cheaper to start than spawn, but unsafe once the parent has started threads;
   shown for comparison, no goal);
4. in-process: the same bodies in the pytest process on one rank (a world-1 gloo group
   opened once): what the bodies cost without any ranks to start.

Before the measured runs, a 1-test run of each variant warms the caches; then 1-test
runs of the pool and of the in-process suite are timed (3 each, interleaved): their
difference is the pool's start-up as a user sees it, beside the start-up the plugin's
end-of-run line reports. Per-test times are each test's logstart-to-logfinish in the
pytest process (a conftest records them), so the median leaves out the pool's first
test, which starts the ranks. Goal: the pool at least 10x faster than spawn in total
wall time. With --busy, two CPU-bound processes run beside every measured run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _harness import figure, make_suite, median, run_pytest, two_cpu_hogs

PER_FILE = 10
#: timed 1-test runs of the pool and of the in-process suite (the pool's start-up)
ONE_TEST_REPEATS = 3

BODIES = '''
"""The test bodies every variant runs, and the hand-rolled launchers."""

import datetime
import multiprocessing
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

TIMEOUT_S = 60.0


def all_reduce_body(rank, world_size, seed):
    base = torch.arange(4096, dtype=torch.float32) + seed
    tensor = base + rank
    dist.all_reduce(tensor)
    expected = base * world_size + sum(range(world_size))
    torch.testing.assert_close(tensor, expected)


def ddp_step_body(rank, world_size, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1000 * seed + rank)  # each rank its own batch
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    optimizer.zero_grad()
    F.mse_loss(ddp(x), y).backward()
    optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    for other in gathered:  # the replicas stayed in sync
        torch.testing.assert_close(other, flat)


BODY = {"all_reduce": all_reduce_body, "ddp_step": ddp_step_body}


def _rank_main(rank, body, world_size, seed, init_method):
    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    try:
        BODY[body](rank, world_size, seed)
    finally:
        dist.destroy_process_group()


def run_spawned(body, seed, tmp_path, world_size=2):
    """torch.multiprocessing.spawn with a file:// store, joined with a timeout."""
    import torch.multiprocessing as mp

    init_method = f"file://{tmp_path / 'store'}"
    context = mp.spawn(
        _rank_main, args=(body, world_size, seed, init_method), nprocs=world_size, join=False
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1.0):  # raises when a rank failed
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            raise AssertionError(f"ranks still running after {TIMEOUT_S} s")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_forked(body, seed, world_size=2):
    """Two multiprocessing.Process (fork) on a free port, joined with a timeout."""
    context = multiprocessing.get_context("fork")
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    processes = [
        context.Process(target=_rank_main, args=(rank, body, world_size, seed, init_method))
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + TIMEOUT_S
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    alive = [process for process in processes if process.is_alive()]
    for process in alive:
        process.kill()
        process.join()
    assert not alive, f"ranks still running after {TIMEOUT_S} s"
    codes = [process.exitcode for process in processes]
    assert codes == [0] * world_size, f"ranks exited with {codes}"
'''

# Each test's logstart-to-logfinish in the pytest process (not in the pool's ranks,
# which have RANK set), written as JSON at the end of the session; and the in-process
# baseline's one process group.
CONFTEST = """
import json
import os
import time

import pytest

_times = {}


def _here():
    return "RANK" not in os.environ and os.environ.get("BENCH_TIMES")


def pytest_runtest_logstart(nodeid):
    if _here():
        _times[nodeid] = [time.perf_counter(), None]


def pytest_runtest_logfinish(nodeid):
    if _here() and nodeid in _times:
        _times[nodeid][1] = time.perf_counter()


@pytest.fixture(scope="session")
def one_rank():
    # a world-1 gloo group for the in-process baseline, opened once
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def pytest_sessionfinish(session):
    path = _here()
    if path:
        with open(path, "w") as out:
            json.dump({k: b - a for k, (a, b) in _times.items() if b is not None}, out)
"""

HEADERS = {
    "pool": "import pytest\n\nfrom _bodies import all_reduce_body, ddp_step_body\n",
    "spawn": "from _bodies import run_spawned\n",
    "fork": "from _bodies import run_forked\n",
    "inproc": "from _bodies import all_reduce_body, ddp_step_body\n",
}

TESTS = {
    "pool": (
        "@pytest.mark.torch_distributed(world_size=2)\n"
        "def test_{body}_{i}(rank, world_size):\n"
        "    {body}_body(rank, world_size, {i})\n"
    ),
    "spawn": 'def test_{body}_{i}(tmp_path):\n    run_spawned("{body}", {i}, tmp_path)\n',
    "fork": 'def test_{body}_{i}():\n    run_forked("{body}", {i})\n',
    "inproc": "def test_{body}_{i}(one_rank):\n    {body}_body(0, 1, {i})\n",
}

PLUGINS = {"pool": ["-p", "torch_core", "-p", "torch_distributed"]}
LABELS = {
    "pool": "pool (torch_distributed marker)",
    "spawn": "hand-rolled mp.spawn + file://",
    "fork": "hand-rolled fork + free port",
    "inproc": "in-process, 1 rank (baseline)",
}
#: the variants whose failures are reported beside their timings instead of stopping
HAND_ROLLED = ("spawn", "fork")
#: one pytest run: wall seconds, each test's seconds, the output
Run = tuple[float, dict[str, float], str]
POOL_LINE = re.compile(
    r"torch: (\d+) tests? ran on torch\.distributed ranks \((.*?)\)"
    r"(?:; rank pools started (\d+) time\(s\), start-up ([\d.]+) s median)?"
)


def suite_files(tests: int) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The suite's files (name -> text) and each variant's test files."""
    files: dict[str, str] = {"_bodies.py": BODIES, "conftest.py": CONFTEST}
    names: dict[str, list[str]] = {}
    for variant, template in TESTS.items():
        names[variant] = []
        for start in range(0, tests, PER_FILE):
            name = f"test_{variant}_{start // PER_FILE}.py"
            body = "".join(
                "\n\n" + template.format(body=("all_reduce", "ddp_step")[i % 2], i=i)
                for i in range(start, min(tests, start + PER_FILE))
            )
            files[name] = HEADERS[variant] + body
            names[variant].append(name)
    return files, names


def run_variant(root: Path, args: Sequence[str], check: bool = True) -> Run:
    """Wall seconds, each test's seconds and the output of one pytest run, autoload off
    (a failing run stops the benchmark, unless ``check`` is false)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        times_path = Path(handle.name)
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "BENCH_TIMES": str(times_path)}
    try:
        elapsed, _, output = run_pytest(root, args, extra_env=env, check=check)
        times = json.loads(times_path.read_text() or "{}")
    finally:
        times_path.unlink(missing_ok=True)
    return elapsed, times, output


def failures(output: str) -> list[str]:
    """A run's failed and erroring tests (pytest's short summary lines), then the
    exceptions their reports end with (a crashed rank's signal, for a hand-rolled
    launcher), each once."""
    summary = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    exceptions = re.findall(r"^E\s+([\w.]+(?:Error|Exception): .*)$", output, re.M)
    return [*summary, *dict.fromkeys(exceptions)]


def pool_line(output: str, tests: int) -> tuple[int, float | None, str]:
    """Pool starts, start-up seconds and the plugin's end-of-run line itself."""
    found = POOL_LINE.search(output)
    if found is None:
        print("  !! the plugin printed no 'ran on torch.distributed ranks' line")
        return 0, None, "(none)"
    line = output[found.start() :].splitlines()[0]
    if int(found.group(1)) != tests:
        print(f"  !! the plugin's line counts {found.group(1)} tests, {tests} ran")
    if found.group(3) is None:
        return 0, None, line
    return int(found.group(3)), float(found.group(4)), line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=50, help="tests per variant (default 50)")
    parser.add_argument("--busy", action="store_true", help="two CPU hogs beside the runs")
    parser.add_argument("--no-fork", action="store_true", help="leave out the fork variant")
    options = parser.parse_args()
    tests = max(2, options.tests)
    files, names = suite_files(tests)
    if options.no_fork:
        del names["fork"]
    root = make_suite(files)
    try:
        one, results = measure(root, names, options.busy)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(one, results, tests, options.busy)
    return 0


def measure(
    root: Path, names: dict[str, list[str]], busy: bool
) -> tuple[dict[str, list[float]], dict[str, Run]]:
    """The timed 1-test runs of the pool and in-process suites, and every full run."""
    first = {v: f"{files[0]}::test_all_reduce_0" for v, files in names.items()}
    for variant, nodeid in first.items():  # warm the file-system and bytecode caches
        run_variant(root, [*PLUGINS.get(variant, []), nodeid])
    results: dict[str, Run] = {}
    with two_cpu_hogs() if busy else contextlib.nullcontext():
        one: dict[str, list[float]] = {"pool": [], "inproc": []}
        for _ in range(ONE_TEST_REPEATS):  # interleaved, so drift hits both alike
            for variant, seconds in one.items():
                seconds.append(run_variant(root, [*PLUGINS.get(variant, []), first[variant]])[0])
        for variant, files in names.items():
            print(f"  running {LABELS[variant]} ...", file=sys.stderr, flush=True)
            # a hand-rolled launcher's own failures are a finding, not the end of the run
            check = variant not in HAND_ROLLED
            results[variant] = run_variant(root, [*PLUGINS.get(variant, []), *files], check)
    return one, results


def report(one: dict[str, list[float]], results: dict[str, Run], tests: int, busy: bool) -> None:
    from pytest_torch.core.cpus import available_cores

    print(
        f"{tests} two-rank tests (half all_reduce, half a DDP step of an MLP with SGD),"
        f" gloo on cpu, {available_cores()} cores{', two CPU hogs beside' if busy else ''}"
    )
    print(f"  {'variant':<32} {'total':>9} {'per test':>10} {'median':>10} {'first':>9}")
    for variant, (total, times, _) in results.items():
        if len(times) != tests:
            print(f"  !! {variant}: {len(times)} test times recorded, {tests} expected")
        ordered = [times[k] for k in sorted(times, key=_order)]
        print(
            f"  {LABELS[variant]:<32} {total:>8.1f}s {total / tests * 1e3:>8.0f}ms"
            f" {median(ordered) * 1e3:>8.0f}ms {ordered[0]:>8.2f}s"
        )
    for variant, (_, _, output) in results.items():
        for line in failures(output):
            print(f"  !! {LABELS[variant]}: {line}")
    pool_total, pool_times, pool_output = results["pool"]
    spawn_total, spawn_times, _ = results["spawn"]
    base_total, base_times, _ = results["inproc"]
    ratio = spawn_total / pool_total
    pool_median = median(list(pool_times.values()))
    per_test_ratio = median(list(spawn_times.values())) / pool_median
    starts, startup, line = pool_line(pool_output, tests)
    first_test = pool_times[min(pool_times, key=_order)]
    one_pool, one_inproc = median(one["pool"]), median(one["inproc"])
    startup_s = startup if startup is not None else first_test - pool_median
    overhead_total = (pool_total - startup_s - base_total) / tests
    overhead = pool_median - median(list(base_times.values()))
    rows = [
        ("spawn / pool, total wall time", f"{ratio:.1f}x",
         f"goal >= 10x; median test {per_test_ratio:.0f}x"),
        *([("fork / pool, total wall time", f"{results['fork'][0] / pool_total:.1f}x",
            "no goal")] if "fork" in results else []),
        ("pool start-up", f"{startup_s:.1f} s",
         f"the plugin's end-of-run line ({starts} pool start(s))"),
        ("", f"{first_test - pool_median:.2f} s", "first test - median test"),
        ("", f"{one_pool - one_inproc:+.2f} s",
         f"1-test runs, median of {ONE_TEST_REPEATS}: {one_pool:.2f} s pool,"
         f" {one_inproc:.2f} s in-process"),
        ("pool overhead per test", f"{overhead * 1e3:.0f} ms",
         "median test - median in-process test"),
        ("", f"{overhead_total * 1e3:.0f} ms",
         f"(total - start-up - in-process total) / {tests}"),
    ]  # fmt: skip
    for name, value, note in rows:
        print(f"  {name:<30} {value:>8}  {note}")
    print(f"  the plugin's line: {line}")
    suffix = ", busy" if busy else ""
    figure(f"distributed: {tests} two-rank tests, hand-rolled spawn / pool (total){suffix}",
           f"{ratio:.1f}x ({spawn_total:.0f} s / {pool_total:.1f} s)", ">= 10x",
           ratio >= 10)  # fmt: skip
    figure(f"distributed: pool start-up, 2 ranks{suffix}", f"{startup_s:.1f} s", "-", None)
    figure(f"distributed: pool overhead per test over in-process (median){suffix}",
           f"{overhead * 1e3:.0f} ms", "-", None)  # fmt: skip


def _order(nodeid: str) -> tuple[int, str]:
    """Run order: by the test's number (files hold consecutive numbers)."""
    return int(nodeid.rsplit("_", 1)[1]), nodeid


if __name__ == "__main__":
    raise SystemExit(main())
