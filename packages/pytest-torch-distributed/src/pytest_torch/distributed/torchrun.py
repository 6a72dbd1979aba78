"""Joining a world that pytest itself was started in: ``torchrun ... -m pytest``.

Every rank runs the same pytest session. The rendezvous store torchrun set up (the
``env://`` contract) carries everything the ranks say to each other, so no process
group outlives a test:

- rank 0's test order is everyone's (``-p randomly`` or not);
- a ``torch_distributed`` test whose ``world_size`` is this world's runs on every rank,
  each with a fresh default process group; one with another ``world_size`` is skipped
  with the reason; a test without the marker runs on rank 0 only;
- each rank hands its reports to rank 0, which logs one merged result per test; the
  other ranks print nothing, and every rank exits with rank 0's status;
- a test that overruns its timeout has every thread's stack written to the rank's
  stderr and the rank exits, so torchrun stops the world instead of hanging.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import pickle
from typing import Any

import pytest

from pytest_torch.distributed import protocol as msg
from pytest_torch.distributed.groups import c10d, group_for_test
from pytest_torch.distributed.markers import DISTRIBUTED
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.world import RankInfo

PREFIX = "pytest-torch/"
#: how long a rank waits for the others between tests (rank 0 may be running the tests
#: that only it runs)
ARRIVAL_TIMEOUT = datetime.timedelta(hours=6)
#: after the test's timeout, how long before the rank gives up on itself
GRACE_S = 30.0


def world_from_environment() -> RankInfo:
    from pytest_torch.core import devices

    if os.environ.get("MASTER_PORT") == "0":
        # torchrun's static rendezvous passes --rdzv-endpoint's port on as it is: every
        # rank would wait for the others on a port no one listens on, silently
        raise pytest.UsageError(
            "torch_distributed: this torchrun world was given MASTER_PORT=0"
            " (--rdzv-endpoint=HOST:0), so its ranks cannot meet: name a free port"
            " (--rdzv-endpoint=HOST:29500), or use --standalone on one machine"
        )
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    accelerators = [t for t in devices.available_device_types() if t != "cpu"]
    device = "cpu"
    if accelerators and devices.device_count(accelerators[0]) > local_rank:
        device = f"{accelerators[0]}:{local_rank}"
    return RankInfo(rank, int(os.environ["WORLD_SIZE"]), local_rank, device)


class TorchrunWorld:
    """This rank's part in a torchrun world (registered by the plugin when pytest was
    started by torchrun)."""

    def __init__(self, config: pytest.Config, info: RankInfo, timeout: float) -> None:
        self.config = config
        self.info = info
        self.timeout = timeout
        self.store: Any = None
        self.seq = 0

    # -- start-up ------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        dist = c10d()

        store, _, _ = next(dist.rendezvous("env://"))
        store.set_timeout(ARRIVAL_TIMEOUT)
        self.store = dist.PrefixStore(PREFIX, store)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        ids = [item.nodeid for item in items]
        # every rank says what it collected, and every rank compares: a difference stops
        # every rank with the same usage error, never one rank waiting for the others
        self.store.set(f"collected/{self.info.rank}", json.dumps(sorted(ids)))
        order = ids
        if self.info.rank == 0:
            self.store.set("order", json.dumps(ids))
        else:
            order = json.loads(self.store.get("order"))
        reference = sorted(order)
        for rank in range(self.info.world_size):
            theirs = json.loads(self.store.get(f"collected/{rank}"))
            if theirs != reference:
                only_there = sorted(set(theirs) - set(reference))[:3]
                missing = sorted(set(reference) - set(theirs))[:3]
                raise pytest.UsageError(
                    f"rank {rank} of the torchrun world collected other tests than rank 0"
                    f" (only there: {', '.join(only_there) or 'none'}; not there:"
                    f" {', '.join(missing) or 'none'}): every rank must see the same files,"
                    " options and selection"
                )
        by_id = {item.nodeid: item for item in items}
        items[:] = [by_id[nodeid] for nodeid in order]
        for item in items:
            mark = DISTRIBUTED.mark_on(item)
            if mark is None:
                if self.info.rank != 0:
                    item.add_marker(pytest.mark.skip(reason="runs on rank 0 of the torchrun world"))
                continue
            wanted = mark.kwargs.get("world_size", mark.args[0] if mark.args else None)
            if wanted != self.info.world_size:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs world_size={wanted}; this torchrun world has"
                        f" {self.info.world_size} ranks"
                    )
                )

    # -- each test -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        mark = DISTRIBUTED.mark_on(item)
        if mark is None or any(m.name == "skip" for m in item.iter_markers()):
            return None
        from _pytest.runner import runtestprotocol

        self.seq += 1
        seq = self.seq
        info = self.info
        self._arrive(seq)
        timeout = float(mark.kwargs.get("timeout") or self.timeout)
        backend = mark.kwargs.get("backend") or _backend(info.device)
        faulthandler.dump_traceback_later(timeout + GRACE_S, exit=True)
        try:
            with group_for_test(
                self.store, f"test{seq}/", backend, info.rank, info.world_size, timeout, info.device
            ):
                reports = runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            faulthandler.cancel_dump_traceback_later()
        config = self.config
        serialized = [
            config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports
        ]
        self.store.set(f"reports/{seq}/{info.rank}", pickle.dumps(serialized))
        if info.rank == 0:
            self._log(item, seq)
        return True

    def _arrive(self, seq: int) -> None:
        """Wait until every rank reached this test (rank 0 may be running tests alone)."""
        self.store.set(f"arrive/{seq}/{self.info.rank}", "1")
        self.store.wait([f"arrive/{seq}/{r}" for r in range(self.info.world_size)])

    def _log(self, item: pytest.Item, seq: int) -> None:
        from pytest_torch.distributed.reports import merged_reports

        run = RankRun(item.nodeid, [])
        for rank in range(self.info.world_size):
            data = pickle.loads(self.store.get(f"reports/{seq}/{rank}"))
            phases = [msg.Phase(seq, rank, d["when"], d["outcome"], d) for d in data]
            run.ranks.append(RankState(rank, phases=phases, done=True))
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in merged_reports(self.config, item, run):
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    # -- the end -------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.store is None:
            return
        if self.info.rank == 0:
            self.store.set("exitstatus", str(int(session.exitstatus)))
        else:
            session.exitstatus = int(self.store.get("exitstatus"))


def _backend(device: str) -> str:
    from pytest_torch.core import devices

    return devices.collective_backend(device.split(":")[0])
