"""pytest wiring of the xdist plugin (entry point ``torch_xdist``).

In each xdist worker: its GPU (current device, ``torch_device`` mapping through core's
``pytest_torch_resolve_device`` hook, memory fraction), its share of the CPU cores,
and the per-GPU lock that ``torch_gpu_exclusive`` tests take exclusively. The
controller checks the options, prints what each worker gets and hands the workers a
shared folder for the locks. Without ``-n`` the plugin only applies an explicit
``--torch-num-threads=N`` and the ``torch_threads`` marker.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.cpus import available_cores
from pytest_torch.core.options import add_option_with_ini, option_or_ini

if TYPE_CHECKING:
    from pytest_torch.xdist.gpus import GpuPlan
    from pytest_torch.xdist.locks import GpuLock
    from pytest_torch.xdist.threads import Applied, Plan

pytest_plugins = ["torch_core"]

THREADS_MARKER = "torch_threads"
EXCLUSIVE_MARKER = "torch_gpu_exclusive"
LOCK_DIR_KEY = "torch_xdist_lock_dir"


class XdistSettings:
    """What this process (controller, worker or plain run) decided at start-up."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, threads_setting: str | int, workers: int, worker: int | None) -> None:
        self.threads_setting = threads_setting
        self.workers = workers  # 0 without xdist
        self.worker = worker  # this worker's number, None outside workers
        self.gpus: GpuPlan | None = None
        self.fraction: float | str | None = None
        self.device: str | None = None  # "cuda:1" in a worker that was given a GPU
        self.fraction_device: str | None = None
        self.applied: Applied | None = None
        self.plan: Plan | None = None
        self.lock: GpuLock | None = None
        self.lock_dir: Path | None = None
        self.owns_lock_dir = False
        self.warning: str | None = None  # more threads than cores


settings_key = pytest.StashKey[XdistSettings]()
threads_before_key = pytest.StashKey[int]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_xdist")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-xdist", "torch-xdist: GPUs and CPU cores shared by workers")
    add_option_with_ini(
        parser,
        group,
        "--torch-xdist-gpus",
        ini="torch_xdist_gpus",
        default=None,
        metavar="LIST",
        help="Spread xdist workers round-robin over these GPUs (CUDA or XPU): 0,1 or"
        " auto (all visible).",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-gpu-memory-fraction",
        ini="torch_gpu_memory_fraction",
        default=None,
        metavar="FRACTION",
        help="Cap each worker's share of its GPU's memory: auto (split between the"
        " workers sharing it) or a number in (0, 1].",
    )
    add_option_with_ini(
        parser,
        group,
        "--torch-num-threads",
        ini="torch_num_threads",
        default="auto",
        metavar="N",
        help="torch threads per process: auto (each xdist worker gets its share of the"
        " cores), a number, or none (torch's default). OMP_NUM_THREADS/MKL_NUM_THREADS"
        " set by you are left alone.",
    )


def _xdist_workers(config: pytest.Config) -> int:
    """How many workers this session runs (0: no xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput.get("workercount", 1))
    if not config.pluginmanager.hasplugin("xdist"):
        return 0
    count = config.getoption("numprocesses", default=None)
    if isinstance(count, int) and count > 0:
        return count
    tx = config.getoption("tx", default=None) or []
    return len(tx)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{EXCLUSIVE_MARKER}: run this test with its GPU to itself: no other test of any"
        " xdist worker runs on that GPU meanwhile (no-op without xdist or GPUs).",
    )
    config.addinivalue_line(
        "markers",
        f"{THREADS_MARKER}(n): run this test with n torch intra-op threads, restored after.",
    )
    from pytest_torch.xdist import threads

    try:
        setting = threads.parse_setting(
            option_or_ini(config, "torch_num_threads"),
            "--torch-num-threads (ini torch_num_threads)",
        )
    except threads.ThreadSettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    workerinput = getattr(config, "workerinput", None)
    worker = None if workerinput is None else int(str(workerinput["workerid"]).removeprefix("gw"))
    settings = XdistSettings(setting, _xdist_workers(config), worker)
    config.stash[settings_key] = settings
    _check_gpu_options(config, settings)
    if worker is None:
        _configure_main(config, settings)
    else:
        _configure_worker(config, settings)
    if settings.applied is not None or settings.lock is not None:
        _need_runner(config)


def _check_gpu_options(config: pytest.Config, settings: XdistSettings) -> None:
    gpus = option_or_ini(config, "torch_xdist_gpus")
    fraction = option_or_ini(config, "torch_gpu_memory_fraction")
    if gpus is None and fraction is None:
        return
    from pytest_torch.xdist import gpus as gpu_plans

    try:
        if fraction is not None:
            settings.fraction = gpu_plans.parse_fraction(
                fraction, "--torch-gpu-memory-fraction (ini torch_gpu_memory_fraction)"
            )
        settings.gpus = gpu_plans.parse_gpus(
            "auto" if gpus is None else gpus, "--torch-xdist-gpus (ini torch_xdist_gpus)"
        )
    except gpu_plans.GpuSettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    if gpus is None:  # a fraction alone: every worker stays on the current GPU
        settings.gpus = settings.gpus._replace(indices=settings.gpus.indices[:1])


def _configure_main(config: pytest.Config, settings: XdistSettings) -> None:
    from pytest_torch.xdist import threads

    cores = available_cores()
    settings.warning = threads.oversubscription(settings.threads_setting, settings.workers, cores)
    if settings.warning is not None:  # in the header, and in the summary for -q runs
        config.issue_config_time_warning(pytest.PytestConfigWarning(settings.warning), stacklevel=2)
    if settings.workers:
        if settings.gpus is not None:
            settings.lock_dir = Path(tempfile.mkdtemp(prefix="pytest-torch-xdist-"))
            settings.owns_lock_dir = True
        config.pluginmanager.register(_Controller(settings), "torch_xdist_controller")
        return
    # no xdist: only an explicit count applies
    settings.plan = threads.plan(settings.threads_setting, 0, cores, os.environ)
    if settings.plan.threads is not None:
        settings.applied = threads.apply(settings.plan.threads)


def _configure_worker(config: pytest.Config, settings: XdistSettings) -> None:
    from pytest_torch.core import devices
    from pytest_torch.xdist import gpus as gpu_plans
    from pytest_torch.xdist import threads

    assert settings.worker is not None
    settings.plan = threads.plan(
        settings.threads_setting, settings.workers, available_cores(), os.environ
    )
    if settings.plan.threads is not None:
        settings.applied = threads.apply(settings.plan.threads, interop=True)
    plan = settings.gpus
    if plan is None:
        return
    index = plan.index_for(settings.worker)
    settings.device = f"{plan.kind}:{index}"
    devices.set_current_device(settings.device)  # before any test makes a context
    if settings.fraction is not None:
        fraction = settings.fraction
        if fraction == "auto":
            fraction = gpu_plans.auto_fraction(
                devices.total_memory(settings.device), plan.sharing(index, settings.workers)
            )
        try:
            devices.set_memory_fraction(settings.device, float(fraction))
        except devices.DeviceSpecError as exc:
            raise pytest.UsageError(f"--torch-gpu-memory-fraction: {exc}") from None
        settings.fraction_device = settings.device
    lock_dir = config.workerinput.get(LOCK_DIR_KEY)  # type: ignore[attr-defined]
    if lock_dir:
        from pytest_torch.xdist.locks import GpuLock

        settings.lock = GpuLock(Path(lock_dir), plan.kind, index)


class _Controller:
    """Registered on the xdist controller only: hands each worker the lock folder."""

    def __init__(self, settings: XdistSettings) -> None:
        self.settings = settings

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.settings.lock_dir is not None:
            node.workerinput[LOCK_DIR_KEY] = str(self.settings.lock_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    if settings.applied is not None:
        settings.applied.undo()
        settings.applied = None
    if settings.fraction_device is not None:
        from pytest_torch.core import devices

        devices.set_memory_fraction(settings.fraction_device, 1.0)
        settings.fraction_device = None
    if settings.owns_lock_dir and settings.lock_dir is not None:
        shutil.rmtree(settings.lock_dir, ignore_errors=True)
        settings.owns_lock_dir = False


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash[settings_key]
    if settings.worker is not None:
        return None
    from pytest_torch.xdist import threads

    cores = available_cores()
    warning = [] if settings.warning is None else [f"  WARNING: {settings.warning}"]
    if not settings.workers:
        if settings.plan is None or settings.plan.threads is None:
            return None
        return [f"torch threads: {settings.plan.describe()} (--torch-num-threads)", *warning]

    plan = threads.plan(settings.threads_setting, settings.workers, cores, os.environ)
    lines = [f"torch xdist: {settings.workers} workers, {cores} cores available"]
    for worker in range(settings.workers):
        gpu = "no GPU assigned"
        if settings.gpus is not None:
            gpu = f"{settings.gpus.kind}:{settings.gpus.index_for(worker)}"
        lines.append(f"  gw{worker}: {gpu}, {plan.describe()}")
    return lines + warning


@pytest.hookimpl(optionalhook=True)
def pytest_torch_resolve_device(config: pytest.Config, device_type: str) -> str | None:
    settings = config.stash.get(settings_key, None)
    if settings is None or settings.device is None:
        return None
    return settings.device if settings.device.split(":")[0] == device_type else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    exclusive = metafunc.definition.get_closest_marker(EXCLUSIVE_MARKER)
    if exclusive is not None and (exclusive.args or exclusive.kwargs):
        raise pytest.Collector.CollectError(
            f"{metafunc.definition.nodeid}: @pytest.mark.{EXCLUSIVE_MARKER} takes no"
            f" arguments (the test gets the whole GPU it runs on); got args"
            f" {exclusive.args!r}, kwargs {exclusive.kwargs!r}"
        )
    marker = metafunc.definition.get_closest_marker(THREADS_MARKER)
    if marker is not None:
        _need_runner(metafunc.config)
        try:
            _pinned_threads(marker, metafunc.definition.nodeid)
        except ValueError as exc:
            raise pytest.Collector.CollectError(str(exc)) from None


def _pinned_threads(marker: pytest.Mark, where: str) -> int:
    args = list(marker.args)
    if "n" in marker.kwargs:
        args.append(marker.kwargs["n"])
    unknown = set(marker.kwargs) - {"n"}
    if unknown or len(args) != 1:
        raise ValueError(
            f"{where}: @pytest.mark.{THREADS_MARKER} takes one thread count, e.g."
            f" @pytest.mark.{THREADS_MARKER}(1); got args {marker.args!r}, kwargs {marker.kwargs!r}"
        )
    count = args[0]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"{where}: @pytest.mark.{THREADS_MARKER} needs a positive thread count, got {count!r}"
        )
    return count


@pytest.hookimpl(tryfirst=True)
def _runtest_setup(item: pytest.Item) -> None:
    settings = item.config.stash[settings_key]
    if settings.applied is not None and settings.applied.pending is not None:
        from pytest_torch.xdist.threads import sync_torch

        sync_torch(settings.applied)
    marker = item.get_closest_marker(THREADS_MARKER)
    if marker is not None:
        import torch

        item.stash[threads_before_key] = torch.get_num_threads()
        torch.set_num_threads(_pinned_threads(marker, item.nodeid))


@pytest.hookimpl(trylast=True)
def _runtest_teardown(item: pytest.Item) -> None:
    before = item.stash.get(threads_before_key, None)
    if before is not None:
        import torch

        torch.set_num_threads(before)
        del item.stash[threads_before_key]


def _uses_gpu(item: pytest.Item, kind: str) -> bool:
    if item.get_closest_marker(EXCLUSIVE_MARKER) is not None:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("torch_device") == kind


@pytest.hookimpl(wrapper=True)
def _runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    settings = item.config.stash[settings_key]
    lock, plan = settings.lock, settings.gpus
    if lock is None or plan is None or not _uses_gpu(item, plan.kind):
        return (yield)
    exclusive = item.get_closest_marker(EXCLUSIVE_MARKER) is not None
    with lock.exclusive() if exclusive else lock.shared():
        return (yield)


RUNNER = "torch_xdist_runner"


class _Runner:
    """The per-test hooks, registered only where they have work (a thread share to hand
    torch, a GPU lock, a torch_threads marker), so other runs pay nothing per test."""

    pytest_runtest_setup = staticmethod(_runtest_setup)
    pytest_runtest_teardown = staticmethod(_runtest_teardown)
    pytest_runtest_protocol = staticmethod(_runtest_protocol)


def _need_runner(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(RUNNER):
        config.pluginmanager.register(_Runner(), RUNNER)
