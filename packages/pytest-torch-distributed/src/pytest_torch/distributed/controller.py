"""The pytest process's side: plans each ``torch_distributed`` test at collection,
keeps one rank pool per (world size, backend, devices), hands each test to its pool
and turns what the ranks did into one pytest result.

A pool starts at its first test and serves every later one; after a hang, a crash, a
failure that left ranks behind, or a test that changed process-wide state, it is
stopped and the next test starts a fresh one. Every pool is stopped at the end of the
session, at exit, and on Ctrl-C; no rank outlives pytest (see :mod:`.processes`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Literal

import pytest

from pytest_torch.core.cpus import available_cores
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.distributed import protocol as msg
from pytest_torch.distributed import rank_warnings
from pytest_torch.distributed.parts import phase_report
from pytest_torch.distributed.plan import Plan
from pytest_torch.distributed.pool import PoolStartError, RankPool, RankRun
from pytest_torch.distributed.reports import merged_reports
from pytest_torch.distributed.world import new_shared_dir

#: the teardown report's attribute that carries what a test cost the pool
REPORT_ATTRIBUTE = "torch_distributed"


class Controller:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pools: dict[tuple[int, str, tuple[str, ...]], RankPool] = {}
        self.nodeids: dict[tuple[int, str, tuple[str, ...]], list[str]] = {}
        self._workdir: Path | None = None
        #: pool key -> why its ranks could not start
        self.start_failures: dict[tuple[int, str, tuple[str, ...]], str] = {}
        self._closed = False
        atexit.register(self.close)

    def planned(self, item: pytest.Item, plan: Plan) -> None:
        if plan.skip is None:
            self.nodeids.setdefault(plan.pool_key, []).append(plain_nodeid(item))

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-torch-distributed-"))
        return self._workdir

    def run(self, item: pytest.Item, plan: Plan) -> list[pytest.TestReport]:
        """Run ``item`` on its pool; the reports pytest logs for it. The warnings the
        ranks raised are recorded for it as pytest records a test's own."""
        started, nodeid = 0.0, plain_nodeid(item)
        failed_start = self.start_failures.get(plan.pool_key)
        if failed_start is not None:
            return [_error(item, "setup", failed_start)]
        pool = self.pools.get(plan.pool_key)
        if pool is None:
            try:
                pool = self._start(plan)
            except PoolStartError as exc:
                text = f"the ranks could not start ({plan.describe()}): {exc}"
                # the same command line starts them the same way: not again in this run
                self.start_failures[plan.pool_key] = f"{text}\n(first seen at {nodeid})"
                return [_error(item, "setup", text)]
            started = pool.started_s
        problem = pool.missing.get(nodeid)
        if problem is not None:
            kind, why = problem
            if kind == "skipped":
                return [_skipped(item, f"skipped in the ranks' collection: {why}")]
            return [_error(item, "setup", f"the ranks could not collect this test:\n{why}")]
        shared = new_shared_dir(item)
        run = pool.run(nodeid, plan.timeout, str(shared) if shared else "")
        per_rank = {state.rank: state.warnings for state in run.ranks}
        rank_warnings.relay(item, per_rank, plan.world_size)
        reports = merged_reports(self.config, item, run) or [
            _error(item, "setup", f"the ranks reported nothing for this test ({run.ending})")
        ]
        if run.needs_new_pool:
            pool.close(graceful=run.ending == "done")
            del self.pools[plan.pool_key]
        _annotate(reports, plan, run, started)
        return reports

    def _start(self, plan: Plan) -> RankPool:
        threads = rank_threads(plan.world_size)
        config = self.config
        basetemp = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        args = [str(arg) for arg in config.invocation_params.args]
        nodeids = self.nodeids.get(plan.pool_key, [])
        index = sum(1 for _ in self.workdir.iterdir())
        workdir = self.workdir / f"pool{index}"

        def setup(rank: int, device: str, port: int, stack_file: Path) -> msg.Setup:
            return msg.Setup(
                rank=rank,
                world_size=plan.world_size,
                backend=plan.backend,
                device=device,
                store_host="127.0.0.1",
                store_port=port,
                threads=threads,
                args=args,
                nodeids=nodeids,
                sys_path=list(sys.path),
                basetemp=str(basetemp / f"distributed-rank{rank}"),
                cache_dir=str(workdir / "cache"),
                stack_file=str(stack_file),
            )

        live = config.getoption("capture", "fd") == "no"  # -s: the ranks' output live too
        pool = RankPool(
            plan.world_size,
            plan.backend,
            list(plan.devices),
            workdir,
            setup,
            live_output=live,
            cwd=config.invocation_params.dir,
        )
        pool.start()
        self.pools[plan.pool_key] = pool
        return pool

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


def rank_threads(world_size: int) -> int:
    """Each rank's share of the cores: this machine's (or this xdist worker's share of
    them) divided among the ranks, whatever the test before set torch's count to."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(1, available_cores() // max(1, workers) // world_size)


def _error(
    item: pytest.Item, when: Literal["setup", "call", "teardown"], text: str
) -> pytest.TestReport:
    return phase_report(item, when, "failed", text)


def _skipped(item: pytest.Item, why: str) -> pytest.TestReport:
    location = (str(item.path), (item.location[1] or 0) + 1, why)
    return phase_report(item, "setup", "skipped", location)


def _annotate(reports: list[pytest.TestReport], plan: Plan, run: RankRun, started: float) -> None:
    """Put what the test cost the pool on the last report (xdist hands it to its
    controller as a plain attribute)."""
    if not reports:
        return
    last = reports[-1]
    last.__dict__[REPORT_ATTRIBUTE] = {
        "where": plan.describe(),
        "started_s": started,
        "ending": "disturbed" if run.ending == "done" and run.needs_new_pool else run.ending,
        "disturbed": next((s.disturbed for s in run.ranks if s.disturbed), ""),
    }


class Tally:
    """The end-of-run line: where the distributed tests ran and what their pools cost;
    fed by reports, so under xdist the controller counts every worker's tests."""

    def __init__(self) -> None:
        self.where: Counter[str] = Counter()
        self.starts: list[float] = []
        self.endings: Counter[str] = Counter()
        #: test id -> what it left changed in its ranks
        self.disturbed: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, REPORT_ATTRIBUTE, None)
        if not isinstance(info, dict):
            return
        self.where[str(info.get("where"))] += 1
        if info.get("started_s"):
            self.starts.append(float(info["started_s"]))
        ending = str(info.get("ending"))
        if ending != "done":
            self.endings[ending] += 1
        if info.get("disturbed"):
            self.disturbed[report.nodeid] = str(info["disturbed"])

    def lines(self) -> list[str]:
        if not self.where:
            return []
        total = sum(self.where.values())
        where = "; ".join(f"{text}: {count}" for text, count in sorted(self.where.items()))
        starts = sorted(self.starts)
        tests = f"{total} test{'s' if total != 1 else ''}"
        line = f"torch: {tests} ran on torch.distributed ranks ({where})"
        if starts:
            line += (
                f"; rank pools started {len(starts)} time(s), start-up"
                f" {starts[len(starts) // 2]:.1f} s median"
            )
        words = {
            "died": "a rank died",
            "timeout": "a hang",
            "alone": "a collective other ranks never joined",
            "stuck": "collectives that could not complete",
            "stopped": "a failure left ranks running",
            "disturbed": "a test changed process state",
        }
        if self.endings:
            line += "; replaced after " + ", ".join(
                f"{words.get(k, k)} ({n})" for k, n in sorted(self.endings.items())
            )
        shown = [
            f"torch:   {nodeid}: {text}; its ranks were replaced"
            for nodeid, text in sorted(self.disturbed.items())[:3]
        ]
        # the family's checks that ran inside the ranks say so in their own lines, counted
        # from the reports the ranks sent back
        return [line, *shown]


def close_quietly(controller: Controller | None) -> None:
    if controller is not None:
        with contextlib.suppress(Exception):
            controller.close()
