"""pytest wiring of the xdist plugin (entry point ``torch_xdist``).

The controller checks the options, decides which GPU and memory fraction each worker
gets and narrows each worker's visible GPUs to its own through the worker's environment
(``CUDA_VISIBLE_DEVICES``, set by execnet before the worker imports anything), prints
what each worker gets and hands the workers a shared folder for the per-GPU locks. In
each worker: its memory fraction, ``torch_device`` mapping through core's
``pytest_torch_resolve_device`` hook, its share of the CPU cores, and the GPU lock every
test holds (``torch_gpu_exclusive`` tests exclusively). Without ``-n`` the plugin applies
an explicit ``--torch-num-threads=N``, ``--torch-gpu-memory-fraction`` and the
``torch_threads`` marker. The decisions live in :mod:`.workers`, :mod:`.gpus`,
:mod:`.threads` and :mod:`.locks`, the options are declared and read in :mod:`.options`,
their values live in :mod:`.settings`, what was decided and changed in :mod:`.state`, and
the markers in :mod:`.markers`; this module only connects them to pytest.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_torch.core.cpus import available_cores
from pytest_torch.core.loading import require_core
from pytest_torch.core.ondemand import register_once
from pytest_torch.core.testkinds import is_unittest
from pytest_torch.xdist import threads, workers
from pytest_torch.xdist.gpus import GpuSettingError
from pytest_torch.xdist.markers import EXCLUSIVE, THREADS
from pytest_torch.xdist.options import add_options, read_settings, worker_number
from pytest_torch.xdist.settings import settings_key
from pytest_torch.xdist.state import XdistSession, session_key
from pytest_torch.xdist.workers import ASSIGNMENT_KEY, LOCK_DIR_KEY

pytest_plugins = ["torch_core"]

EXCLUSIVE_MARKER = EXCLUSIVE.name
#: the plugin name of the per-test hooks (:class:`_Runner`), registered on demand
RUNNER = "torch_xdist_runner"

threads_before_key = pytest.StashKey[int]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_xdist")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    EXCLUSIVE.register(config)
    THREADS.register(config)
    settings = config.stash[settings_key] = read_settings(config)
    # kept before anything is changed: undone at exit
    session = config.stash[session_key] = XdistSession(settings)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    try:
        if workerinput is None:
            workers.configure_main(
                session,
                cores=available_cores(),
                warn=lambda text: config.issue_config_time_warning(
                    pytest.PytestConfigWarning(text), stacklevel=2
                ),
            )
        else:  # the controller checked the options and decided this worker's GPU
            workers.configure_worker(session, workerinput, cores=available_cores())
    except GpuSettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.worker is None and settings.workers:
        config.pluginmanager.register(_Controller(session), "torch_xdist_controller")
    if session.applied is not None or session.lock is not None:
        register_once(config, RUNNER, _Runner)


class _Controller:
    """Registered on the xdist controller only: narrows each worker's visible GPUs and
    hands it its assignment and the lock folder."""

    def __init__(self, session: XdistSession) -> None:
        self.session = session
        self.specs = workers.SpecAssignments(session.assignments)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        for position, spec in enumerate(specs):
            assignment = self.specs.for_spec(spec, position)
            if assignment is not None and assignment.variable is not None:
                # execnet sets these in the new process before it imports anything
                spec.env[assignment.variable] = assignment.value

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.session.lock_dir is not None:
            node.workerinput[LOCK_DIR_KEY] = str(self.session.lock_dir)
        assignment = self.specs.for_spec(
            node.gateway.spec, worker_number(node.workerinput.get("workerid"))
        )
        if assignment is not None:
            node.workerinput[ASSIGNMENT_KEY] = assignment._asdict()


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(session_key, None)
    if session is not None:
        workers.undo(session)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash[session_key]
    if session.settings.worker is not None:
        return None
    return workers.header_lines(session, available_cores())


def pytest_torch_resolve_device(config: pytest.Config, device_type: str) -> str | None:
    session = config.stash.get(session_key, None)
    if session is None or session.device is None:
        return None
    return session.device if session.device.split(":")[0] == device_type else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    exclusive = EXCLUSIVE.mark_on(metafunc)
    if exclusive is not None and (exclusive.args or exclusive.kwargs):
        raise pytest.Collector.CollectError(
            f"{metafunc.definition.nodeid}: @pytest.mark.{EXCLUSIVE_MARKER} takes no"
            f" arguments (the test gets the whole GPU it runs on); got args"
            f" {exclusive.args!r}, kwargs {exclusive.kwargs!r}"
        )
    marker = THREADS.mark_on(metafunc)
    if marker is not None:
        register_once(metafunc.config, RUNNER, _Runner)
        try:
            threads.pinned_count(marker.args, marker.kwargs, metafunc.definition.nodeid)
        except ValueError as exc:
            raise pytest.Collector.CollectError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # unittest.TestCase methods never reach pytest_generate_tests: a thread pin on one is
    # seen here (and its arguments checked when the test runs)
    if config.pluginmanager.has_plugin(RUNNER):
        return
    if any(is_unittest(item) and THREADS.mark_on(item) for item in items):
        register_once(config, RUNNER, _Runner)


class _Runner:
    """The per-test hooks, registered only where they have work (a thread share to hand
    torch, a GPU lock, a torch_threads marker), so other runs pay nothing per test."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        session = item.config.stash[session_key]
        if session.applied is not None and session.applied.pending is not None:
            threads.sync_torch(session.applied)
        marker = THREADS.mark_on(item)
        if marker is not None:
            try:  # checked at collection, except for unittest methods
                count = threads.pinned_count(marker.args, marker.kwargs, item.nodeid)
            except ValueError as exc:
                raise pytest.fail.Exception(str(exc), pytrace=False) from None
            item.stash[threads_before_key] = threads.pin(count)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        before = item.stash.get(threads_before_key, None)
        if before is not None:
            threads.unpin(before)
            del item.stash[threads_before_key]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        # every test, not only those whose torch_device is the GPU: a test that makes
        # tensors on "cuda" itself, or calls code that does, is invisible from here, and
        # must still never run beside an exclusive test
        lock = item.config.stash[session_key].lock
        if lock is None:
            return (yield)
        exclusive = EXCLUSIVE.mark_on(item) is not None
        with lock.exclusive() if exclusive else lock.shared():
            return (yield)
