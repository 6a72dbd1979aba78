"""A rank's pytest session: the controller's command line, narrowed to the distributed
tests, serving one test at a time.

The session is started like a pytest-xdist worker's (the same plugins and options,
re-parsed from the command line; nothing that writes the run's reports), collects only
the test ids the controller names, and replaces pytest's run loop with
:class:`RankRunner`, which waits for the controller: for each test it opens a fresh
default process group on the pool's rendezvous, runs pytest's own protocol (fixtures
evaluated here, in the rank), streams each phase's report back, closes the group and
says whether the test left the process changed, with the warnings the test raised. A
thread of its own answers the controller's probes with the rank's record of the test's
collectives (:mod:`.flight`), also while the test waits in one.
"""

from __future__ import annotations

import contextlib
import datetime
import fnmatch
import os
import sys
import tempfile
import threading
import time
import traceback
import warnings
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

import pytest

from pytest_torch.distributed import protocol as msg
from pytest_torch.distributed.collectives import Record
from pytest_torch.distributed.flight import snapshot
from pytest_torch.distributed.groups import c10d, group_for_test
from pytest_torch.distributed.options import RESTORE_ENV_OPTION
from pytest_torch.distributed.parts import phase_report
from pytest_torch.distributed.world import (
    RankInfo,
    SharedContext,
    rank_key,
    run_without_terminal,
    shared_key,
)

#: options that are the controller's alone: its reports, its selection, its workers
_CONTROLLER_ONLY: dict[str, Any] = {
    "numprocesses": None,
    "maxprocesses": None,
    "dist": "no",
    "distload": False,
    "looponfail": False,
    "usepdb": False,
    "xmlpath": None,
    "htmlpath": None,
    "resultlog": None,
    "lf": False,
    "failedfirst": False,
    "newfirst": False,
    "stepwise": False,
    "stepwise_skip": False,
    "keyword": "",
    "markexpr": "",
    "deselect": [],
    "exitfirst": False,
    "maxfail": 0,
}


def run_session(
    setup: msg.Setup, inbox: Connection, outbox: Connection, probes: tuple[Connection, Connection]
) -> int:
    """Start this rank's pytest session and serve tests until told to stop."""
    from _pytest.config import _prepareconfig

    if setup.capture_dir:
        keep_captured_output(Path(setup.capture_dir))
    args = [*setup.args, "-p", "no:randomly"]
    if "no:cacheprovider" not in " ".join(setup.args).replace("-p ", ""):
        args += ["-o", f"cache_dir={setup.cache_dir}"]  # the run's cache is the controller's
    config = _prepareconfig(args, None)
    # the controller reports; a rank's own output is its log, kept for what pytest does
    # not capture (a crash, native libraries' messages)
    run_without_terminal(config.pluginmanager)
    for name, value in {**_CONTROLLER_ONLY, "basetemp": setup.basetemp}.items():
        if hasattr(config.option, name) or name == "basetemp":
            setattr(config.option, name, value)
    # the files, not the test ids: a test a rank cannot collect (a module skipped or
    # failing to import only there) is then told apart from the others
    files = dict.fromkeys(nodeid.split("::")[0] for nodeid in setup.nodeids)
    config.args = [str(config.rootpath / file) for file in files]
    config.stash[rank_key] = RankInfo(setup.rank, setup.world_size, setup.rank, setup.device)
    runner = RankRunner(setup, inbox, outbox, probes)
    config.pluginmanager.register(runner, "torch_distributed_rank")
    code = config.hook.pytest_cmdline_main(config=config)
    return int(code or 0)


def keep_captured_output(folder: Path) -> None:
    """Let pytest's fd capture write to files in ``folder`` instead of anonymous ones,
    so that what a rank wrote during a test before it died (a C++ library's message
    before an abort, which goes to the captured fd 2) can be read after its death.
    This is the rank's own process, which ends with its session."""
    from _pytest import capture

    if not callable(getattr(capture, "TemporaryFile", None)):
        return  # a pytest that captures another way: a dead rank's output is lost
    folder.mkdir(parents=True, exist_ok=True)

    def named_file(mode: str = "w+b", buffering: int = -1, **_: object) -> IO[bytes]:
        handle, _path = tempfile.mkstemp(dir=folder, prefix="fd-")
        return open(handle, mode, buffering=buffering)  # pytest closes it

    capture.TemporaryFile = named_file  # type: ignore[attr-defined,assignment]


class RankRunner:
    """The rank's run loop and its reports (registered in the rank's session only)."""

    def __init__(
        self,
        setup: msg.Setup,
        inbox: Connection,
        outbox: Connection,
        probes: tuple[Connection, Connection],
    ) -> None:
        self.setup = setup
        self.inbox = inbox
        self.outbox = outbox
        self.probes = probes
        self.items: dict[str, pytest.Item] = {}
        #: collector id -> ("skipped" or "error", why)
        self.collect_problems: dict[str, tuple[str, str]] = {}
        self.seq = 0
        #: when the current (or last) test's process group was formed, ns since the epoch
        self.since_ns = 0
        self.warnings: list[msg.RankWarning] = []
        self.restore_env: tuple[str, ...] = ()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = {item.nodeid: item for item in items}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_problems[report.nodeid] = ("error", str(report.longreprtext))
        elif report.skipped:
            longrepr = report.longrepr
            why = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
            self.collect_problems[report.nodeid] = ("skipped", why)

    @pytest.hookimpl(tryfirst=True)
    def pytest_torch_resolve_device(self, device_type: str) -> str | None:
        device = self.setup.device
        return device if device.split(":")[0] == device_type else None

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str) -> None:
        if self.seq and when == "runtest":
            self.warnings.append(warning_text(warning_message))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.seq:
            return
        config = self._config
        data = config.hook.pytest_report_to_serializable(config=config, report=report)
        self.outbox.send(msg.Phase(self.seq, self.setup.rank, report.when, report.outcome, data))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        import torch

        dist = c10d()
        self._config = session.config
        self.restore_env = RESTORE_ENV_OPTION.read(session.config)
        torch.set_num_threads(self.setup.threads)
        self.store = dist.TCPStore(
            self.setup.store_host,
            self.setup.store_port,
            is_master=False,
            timeout=datetime.timedelta(seconds=300),
        )
        missing = {
            nodeid: self._why_missing(nodeid)
            for nodeid in self.setup.nodeids
            if nodeid not in self.items
        }
        main_thread = threading.main_thread().ident or 0
        threading.Thread(target=self._serve_probes, name="pytest-torch-probes", daemon=True).start()
        self.outbox.send(msg.Ready(self.setup.rank, main_thread, missing))
        while True:
            try:
                order = self.inbox.recv()
            except EOFError:  # the controller is gone
                order = msg.Stop()
            if isinstance(order, msg.Stop):
                # the run's reports, summaries, cache and files are the controller's: a
                # rank ends here, before any plugin's end-of-session work
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
            if isinstance(order, msg.Run):
                self._run(order)

    def _serve_probes(self) -> None:
        """Answer each probe with this rank's record of the test's collectives."""
        requests, answers = self.probes
        while True:
            try:
                request = requests.recv()
            except (EOFError, OSError):
                return
            rank = self.setup.rank
            if isinstance(request, msg.StackProbe):
                try:
                    answers.send(msg.Stacked(request.number, main_frames()))
                except OSError:
                    return
                continue
            if not isinstance(request, msg.Probe):
                continue
            try:
                record = (
                    snapshot(
                        rank, self.since_ns, request.stacks, self.setup.backend, request.active
                    )
                    if self.since_ns
                    else Record(rank, missing="no test has run in it")
                )
            except Exception as exc:  # never the rank's end
                record = Record(rank, missing=f"{type(exc).__name__}: {exc}")
            try:
                answers.send(msg.Recorded(request.number, record))
            except OSError:
                return

    def _why_missing(self, nodeid: str) -> tuple[str, str]:
        for collector, problem in self.collect_problems.items():
            if nodeid.startswith(collector):
                return problem
        return ("error", "the rank's collection did not produce this test id")

    def _run(self, order: msg.Run) -> None:
        item = self.items.get(order.nodeid)
        if item is None:
            self.outbox.send(msg.Done(order.seq, self.setup.rank, "not collected"))
            return
        before = state()
        environ = dict(os.environ)
        self.seq = order.seq
        self.warnings = []
        setup = self.setup
        if order.store_port:
            os.environ["MASTER_PORT"] = str(order.store_port)
        shared = Path(order.shared_dir) if order.shared_dir else None
        store = c10d().PrefixStore(f"test{order.seq}/shared/", self.store)
        self._config.stash[shared_key] = SharedContext(store, shared)
        self.since_ns = time.time_ns()
        try:
            with contextlib.ExitStack() as stack:
                try:
                    stack.enter_context(
                        group_for_test(
                            self.store,
                            f"test{order.seq}/",
                            setup.backend,
                            setup.rank,
                            setup.world_size,
                            order.timeout,
                            setup.device,
                        )
                    )
                except Exception as exc:  # a test's error, never the rank's end
                    self._no_group(item, order, exc)
                    return
                item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
        finally:
            self.seq = 0
            del self._config.stash[shared_key]
            undo_env(environ, ("MASTER_PORT", *self.restore_env))
        disturbed = changes(before, state())
        self.outbox.send(msg.Done(order.seq, self.setup.rank, disturbed, tuple(self.warnings)))

    def _no_group(self, item: pytest.Item, order: msg.Run, exc: Exception) -> None:
        """The process group could not be formed: the test errors in setup, and the pool
        is replaced after it."""
        text = (
            f"rank {self.setup.rank} could not join the test's process group"
            f" ({self.setup.backend}): {type(exc).__name__}: {exc}"
        )
        self.pytest_runtest_logreport(phase_report(item, "setup", "failed", text))
        self.outbox.send(msg.Done(order.seq, self.setup.rank, "its process group failed"))


def warning_text(warning: warnings.WarningMessage) -> msg.RankWarning:
    """A warning as text: its class may not be importable elsewhere."""
    category = warning.category
    return msg.RankWarning(
        getattr(category, "__module__", "builtins"),
        getattr(category, "__qualname__", category.__name__),
        str(warning.message),
        str(warning.filename),
        int(warning.lineno or 0),
    )


def main_frames() -> tuple[tuple[str, int, str], ...]:
    """The main thread's Python stack now, outermost first (read from another thread)."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None:
        return ()
    return tuple((f.filename, f.lineno or 0, f.name) for f in traceback.extract_stack(frame))


def undo_env(before: dict[str, str], patterns: tuple[str, ...]) -> None:
    """Put back the variables matching ``patterns`` as they were in ``before``."""
    names = set(before) | set(os.environ)
    for name in names:
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            continue
        if name not in before:
            os.environ.pop(name, None)
        elif os.environ.get(name) != before[name]:
            os.environ[name] = before[name]


#: variables set by torch the first time a module is imported, and by pytest per test
_TORCH_OWN_VARIABLES = ("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE_", "PYTEST_CURRENT_TEST")


def state() -> dict[str, object]:
    """Process-wide settings a test could leave changed for the next one."""
    import torch

    return {
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.is_grad_enabled()": torch.is_grad_enabled(),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.get_num_threads()": torch.get_num_threads(),
        "the current directory": os.getcwd(),
        "the environment variables": {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(_TORCH_OWN_VARIABLES)
        },
    }


def changes(before: dict[str, object], after: dict[str, object]) -> str:
    """What differs, e.g. "the test left torch.get_num_threads() at 4 (was 1)"."""
    changed = []
    for name, value in before.items():
        now = after[name]
        if value == now:
            continue
        if isinstance(value, dict) and isinstance(now, dict):
            added = sorted(set(now) - set(value))
            removed = sorted(set(value) - set(now))
            altered = sorted(k for k in set(now) & set(value) if now[k] != value[k])
            what = ", ".join(
                [
                    *(f"+{k}" for k in added),
                    *(f"-{k}" for k in removed),
                    *(f"{k} set" for k in altered),
                ]
            )
            changed.append(f"{name} changed ({what})")
        else:
            changed.append(f"{name} at {now!r} (was {value!r})")
    return f"the test left {'; '.join(changed)}" if changed else ""
