"""Joining a world that pytest itself was started in: ``torchrun ... -m pytest``.

Every rank runs the same pytest session. A session that collects no
``torch_distributed`` test is left exactly as it would run without the plugin: every
rank runs every test and reports it, and the plugin touches neither torchrun's store
nor the output. One that collects such tests joins the world, through the rendezvous
store torchrun set up (the ``env://`` contract):

- rank 0's test order is everyone's (``-p randomly`` or not);
- a ``torch_distributed`` test whose ``world_size`` is this world's runs on every rank,
  on a fresh default process group (or on the one the suite's own code opened, left
  open); one with another ``world_size`` is skipped with the reason;
- each rank hands its reports of those tests, its warnings and, after a failure, its
  record of the test's collectives to rank 0, which logs one merged result per test;
- tests without the marker run on every rank and are reported by each, as without the
  plugin; only rank 0 writes the report files (JUnit XML, pytest-html);
- every rank exits with its own failure status, or else rank 0's;
- a test that overruns its timeout has every thread's stack written to the rank's
  stderr and the rank exits, so torchrun stops the world instead of hanging.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_torch.distributed import protocol as msg
from pytest_torch.distributed import rank_warnings
from pytest_torch.distributed.collectives import Record
from pytest_torch.distributed.groups import c10d, group_for_test
from pytest_torch.distributed.markers import DISTRIBUTED
from pytest_torch.distributed.parts import phase_report
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.world import (
    RankInfo,
    SharedContext,
    new_shared_dir,
    rank_key,
    shared_key,
)

PREFIX = "pytest-torch/"
#: how long a rank waits for the others between tests (rank 0 may be running the tests
#: that only it runs)
ARRIVAL_TIMEOUT = datetime.timedelta(hours=6)
#: how long rank 0 waits for every rank to say what it collected
COLLECTED_TIMEOUT = datetime.timedelta(minutes=10)
#: after the test's timeout, how long before the rank gives up on itself
GRACE_S = 30.0
#: how long rank 0 waits for the other ranks' records after a failure
RECORDS_TIMEOUT = datetime.timedelta(seconds=60)


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


class _Warnings:
    """Stands in for ``item.ihook`` in pytest's ``catch_warnings_for_item``: keeps the
    warnings a test raised instead of reporting them here."""

    def __init__(self) -> None:
        self.caught: list[msg.RankWarning] = []
        self.pytest_warning_recorded = self

    def call_historic(self, kwargs: dict[str, Any]) -> None:
        from pytest_torch.distributed.rank_session import warning_text

        self.caught.append(warning_text(kwargs["warning_message"]))


class TorchrunWorld:
    """This rank's part in a torchrun world (registered by the plugin when pytest was
    started by torchrun); it acts only once the session collected a marked test."""

    def __init__(self, config: pytest.Config, timeout: float) -> None:
        self.config = config
        self.info = RankInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 0, "cpu")
        self.timeout = timeout
        self.store: Any = None
        self.seq = 0
        #: the marked tests this rank ran
        self.ran = 0

    @property
    def joined(self) -> bool:
        return self.store is not None

    # -- start-up ------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if not any(DISTRIBUTED.mark_on(item) is not None for item in items):
            return  # nothing of ours: the session runs as it would without the plugin
        self.info = config.stash[rank_key] = world_from_environment()
        store, _, _ = next(c10d().rendezvous("env://"))
        store.set_timeout(ARRIVAL_TIMEOUT)
        self.store = c10d().PrefixStore(PREFIX, store)
        items[:] = self._in_rank_0s_order(items)
        for item in items:
            mark = DISTRIBUTED.mark_on(item)
            if mark is None:
                continue
            wanted = mark.kwargs.get("world_size", mark.args[0] if mark.args else None)
            if wanted != self.info.world_size:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"needs world_size={wanted}; this torchrun world has"
                        f" {self.info.world_size} ranks"
                    )
                )
        if self.info.rank != 0:
            _leave_report_files_to_rank_0(config)

    def _in_rank_0s_order(self, items: list[pytest.Item]) -> list[pytest.Item]:
        """Every rank says what it collected, and every rank compares: a difference
        stops every rank with the same usage error, never one rank waiting."""
        ids = [item.nodeid for item in items]
        self.store.set(f"collected/{self.info.rank}", json.dumps(sorted(ids)))
        order = ids
        if self.info.rank == 0:
            self.store.set("order", json.dumps(ids))
        else:
            self._wait(["order"], 0)
            order = json.loads(self.store.get("order"))
        reference = sorted(order)
        for rank in range(self.info.world_size):
            self._wait([f"collected/{rank}"], rank)
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
        return [by_id[nodeid] for nodeid in order]

    def _wait(self, keys: list[str], rank: int) -> None:
        try:
            self.store.wait(keys, COLLECTED_TIMEOUT)
        except Exception:  # torch's DistStoreError: a timeout
            minutes = COLLECTED_TIMEOUT.total_seconds() / 60
            raise pytest.UsageError(
                f"rank {rank} of the torchrun world did not say what it collected within"
                f" {minutes:.0f} minutes: it collected no torch_distributed test (the ranks"
                " must see the same files, options and selection), or stopped before"
            ) from None

    # -- each test -----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        mark = DISTRIBUTED.mark_on(item)
        if not self.joined or mark is None:
            return None  # the test runs on every rank as without the plugin
        if any(m.name == "skip" for m in item.iter_markers()):
            if self.info.rank != 0:
                return True  # rank 0 reports the skip
            return None
        self.seq += 1
        self.ran += 1
        seq = self.seq
        self._arrive(seq)
        timeout = float(mark.kwargs.get("timeout") or self.timeout)
        reports, caught, since = self._run(item, nextitem, mark.kwargs.get("backend"), timeout)
        config = self.config
        serialized = [
            config.hook.pytest_report_to_serializable(config=config, report=r) for r in reports
        ]
        self.store.set(f"reports/{seq}/{self.info.rank}", pickle.dumps((serialized, caught)))
        if self.info.rank == 0:
            self._log(item, seq, since)
        elif self.store.get(f"verdict/{seq}") == b"records":
            self._send_record(seq, since)
        return True

    def _run(
        self, item: pytest.Item, nextitem: pytest.Item | None, backend: str | None, timeout: float
    ) -> tuple[list[pytest.TestReport], list[msg.RankWarning], int]:
        from _pytest.runner import runtestprotocol
        from _pytest.warnings import catch_warnings_for_item

        info = self.info
        caught = _Warnings()
        shared = SharedContext(
            c10d().PrefixStore(f"test{self.seq}/shared/", self.store), self._shared_dir(item)
        )
        self.config.stash[shared_key] = shared
        faulthandler.dump_traceback_later(timeout + GRACE_S, exit=True)
        since = time.time_ns()
        try:
            with (
                group_for_test(
                    self.store,
                    f"test{self.seq}/",
                    backend or _backend(info.device),
                    info.rank,
                    info.world_size,
                    timeout,
                    info.device,
                    named=backend is not None,
                    keep_theirs=True,
                ),
                catch_warnings_for_item(self.config, caught, "runtest", item),
            ):
                reports = runtestprotocol(item, nextitem=nextitem, log=False)
        except Exception as exc:  # the group could not be formed: the test's error
            text = f"rank {info.rank} could not join the test's process group: {exc}"
            reports = [phase_report(item, "setup", "failed", text)]
        finally:
            faulthandler.cancel_dump_traceback_later()
            del self.config.stash[shared_key]
        return reports, caught.caught, since

    def _shared_dir(self, item: pytest.Item) -> Path | None:
        """Rank 0's fresh folder for the test, if it asks for one (on several machines
        it exists only where the file system is shared)."""
        if "shared_tmp_path" not in getattr(item, "fixturenames", ()):
            return None
        key = f"test{self.seq}/shared_dir"
        if self.info.rank == 0:
            self.store.set(key, str(new_shared_dir(item)))
        self.store.wait([key])
        return Path(self.store.get(key).decode())

    def _arrive(self, seq: int) -> None:
        """Wait until every rank reached this test."""
        self.store.set(f"arrive/{seq}/{self.info.rank}", "1")
        self.store.wait([f"arrive/{seq}/{r}" for r in range(self.info.world_size)])

    def _record(self, since: int, stacks: bool) -> Record:
        from pytest_torch.distributed.flight import snapshot

        try:
            backend = str(c10d().get_backend()) if c10d().is_initialized() else "gloo"
            return snapshot(self.info.rank, since, stacks, backend)
        except Exception as exc:  # never the session's end
            return Record(self.info.rank, missing=f"{type(exc).__name__}: {exc}")

    def _send_record(self, seq: int, since: int) -> None:
        record = self._record(since, stacks=True)
        self.store.set(f"records/{seq}/{self.info.rank}", pickle.dumps(record))

    def _log(self, item: pytest.Item, seq: int, since: int) -> None:
        from pytest_torch.distributed.reports import merged_reports

        run = RankRun(item.nodeid, [])
        caught: dict[int, tuple[msg.RankWarning, ...]] = {}
        for rank in range(self.info.world_size):
            data, warned = pickle.loads(self.store.get(f"reports/{seq}/{rank}"))
            phases = [msg.Phase(seq, rank, d["when"], d["outcome"], d) for d in data]
            run.ranks.append(RankState(rank, phases=phases, done=True))
            caught[rank] = tuple(warned)
        failed = any(state.failed for state in run.ranks)
        self.store.set(f"verdict/{seq}", "records" if failed else "ok")
        if failed:
            run.records = self._gather_records(seq, since)
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        for report in merged_reports(self.config, item, run):
            ihook.pytest_runtest_logreport(report=report)
        rank_warnings.relay(item, caught, self.info.world_size)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _gather_records(self, seq: int, since: int) -> dict[int, Record]:
        records = {0: self._record(since, stacks=True)}
        for rank in range(1, self.info.world_size):
            key = f"records/{seq}/{rank}"
            try:
                self.store.wait([key], RECORDS_TIMEOUT)
                records[rank] = pickle.loads(self.store.get(key))
            except Exception:  # a rank that did not answer: compared without it
                continue
        return records

    # -- the end -------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.joined:
            return
        if self.info.rank == 0:
            self.store.set("exitstatus", str(int(session.exitstatus)))
        elif int(session.exitstatus) in (0, 5):  # its own tests passed: rank 0 tells
            session.exitstatus = int(self.store.get("exitstatus"))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.joined and self.info.rank != 0 and self.ran:
            terminalreporter.write_line(
                f"torch: {self.ran} torch_distributed test(s) ran here as rank"
                f" {self.info.rank} of {self.info.world_size}; rank 0 reports them"
            )


def _leave_report_files_to_rank_0(config: pytest.Config) -> None:
    """Unplug this rank's JUnit XML and pytest-html writers: rank 0 writes the files,
    with the merged results of the marked tests."""
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        del config.stash[xml_key]
        config.pluginmanager.unregister(xml)
    for plugin in list(config.pluginmanager.get_plugins()):
        if type(plugin).__module__.startswith("pytest_html."):
            config.pluginmanager.unregister(plugin)


def _backend(device: str) -> str:
    from pytest_torch.core import devices

    return devices.collective_backend(device.split(":")[0])
