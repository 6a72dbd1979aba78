"""pytest wiring of the xdist plugin (entry point ``torch_xdist``).

The controller checks the options, decides which GPU and memory fraction each worker
gets (:class:`~pytest_torch.xdist.gpus.Assignment`) and narrows each worker's visible
GPUs to its own through the worker's environment (``CUDA_VISIBLE_DEVICES``, set by
execnet before the worker imports anything), prints what each worker gets and hands
the workers a shared folder for the per-GPU locks. In each worker: its memory fraction,
``torch_device`` mapping through core's ``pytest_torch_resolve_device`` hook, its share
of the CPU cores, and the GPU lock every test holds (``torch_gpu_exclusive`` tests
exclusively). Without ``-n`` the plugin applies an explicit ``--torch-num-threads=N``,
``--torch-gpu-memory-fraction`` and the ``torch_threads`` marker.
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
    from pytest_torch.xdist.gpus import Assignment, GpuPlan
    from pytest_torch.xdist.locks import GpuLock
    from pytest_torch.xdist.threads import Applied, Plan

pytest_plugins = ["torch_core"]

THREADS_MARKER = "torch_threads"
EXCLUSIVE_MARKER = "torch_gpu_exclusive"
LOCK_DIR_KEY = "torch_xdist_lock_dir"
ASSIGNMENT_KEY = "torch_xdist_assignment"
GPUS_SOURCE = "--torch-xdist-gpus (ini torch_xdist_gpus)"
FRACTION_SOURCE = "--torch-gpu-memory-fraction (ini torch_gpu_memory_fraction)"


class XdistSettings:
    """What this process (controller, worker or plain run) decided at start-up."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, threads_setting: str | int, workers: int, worker: int | None) -> None:
        self.threads_setting = threads_setting
        self.workers = workers  # 0 without xdist
        self.worker = worker  # this worker's number, None outside workers
        self.gpus: GpuPlan | None = None
        self.narrow = False  # --torch-xdist-gpus given: each worker sees only its GPU
        self.fraction: float | str | None = None
        self.assignments: list[Assignment] = []  # controller: one per worker
        self.assignment: Assignment | None = None  # worker: its own
        self.device: str | None = None  # what the worker's GPU is called in the worker
        self.fraction_device: str | None = None
        #: the fraction in force before ours (torch's default 1.0 unless someone set one)
        self.fraction_before = 1.0
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
    count = 0
    for spec in config.getoption("tx", default=None) or []:  # "2*popen" is two workers
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def _worker_number(workerid: object) -> int:
    """``gw3`` -> 3; an id of the user's own (``--tx id=x//popen``) -> 0."""
    number = str(workerid).removeprefix("gw")
    return int(number) if number.isdigit() else 0


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
    worker = None if workerinput is None else _worker_number(workerinput["workerid"])
    settings = XdistSettings(setting, _xdist_workers(config), worker)
    config.stash[settings_key] = settings
    if worker is None:
        _check_gpu_options(config, settings)
        _configure_main(config, settings)
    else:  # the controller checked the options and decided this worker's GPU
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
            settings.fraction = gpu_plans.parse_fraction(fraction, FRACTION_SOURCE)
        settings.gpus = gpu_plans.parse_gpus("auto" if gpus is None else gpus, GPUS_SOURCE)
    except gpu_plans.GpuSettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    settings.narrow = gpus is not None
    if gpus is None:  # a fraction alone: the current GPU, every GPU stays visible
        from pytest_torch.core import devices

        current = devices.default_device(settings.gpus.kind).index or 0
        settings.gpus = settings.gpus._replace(indices=(current,))


def _plan_assignments(config: pytest.Config, settings: XdistSettings) -> None:
    """The controller's decision for each worker; a usage error when it cannot work."""
    from pytest_torch.core import devices
    from pytest_torch.xdist import gpus as gpu_plans

    plan = settings.gpus
    assert plan is not None
    variable = gpu_plans.VISIBILITY_VARIABLES[plan.kind] if settings.narrow else None
    if variable is not None:
        for spec in config.getoption("tx", default=None) or []:
            if f"env:{variable}=" in str(spec):
                raise pytest.UsageError(
                    f"--tx {spec}: this worker spec sets {variable} itself, and"
                    f" {GPUS_SOURCE} sets it for every worker to give each its GPU. Drop"
                    f" env:{variable} from the spec, or drop --torch-xdist-gpus and choose"
                    " the GPUs in your specs."
                )
    fractions: dict[int, float] = {}
    try:
        for index in sorted(set(plan.indices)):
            sharing = plan.sharing(index, settings.workers)
            if settings.fraction is None or not sharing:
                continue
            if settings.fraction == "auto":
                device = f"{plan.kind}:{index}"
                fractions[index] = gpu_plans.auto_fraction(
                    devices.total_memory(device), sharing, device
                )
            else:
                fractions[index] = float(settings.fraction)
        outer = os.environ.get(variable) if variable is not None else None
        for worker in range(settings.workers):
            index = plan.index_for(worker)
            value = None if variable is None else gpu_plans.visible_value(plan.kind, index, outer)
            settings.assignments.append(
                gpu_plans.Assignment(plan.kind, index, variable, value, fractions.get(index))
            )
    except gpu_plans.GpuSettingError as exc:
        raise pytest.UsageError(str(exc)) from None


def _configure_main(config: pytest.Config, settings: XdistSettings) -> None:
    from pytest_torch.xdist import threads

    cores = available_cores()
    settings.warning = threads.oversubscription(settings.threads_setting, settings.workers, cores)
    if settings.warning is not None:  # in the header, and in the summary for -q runs
        config.issue_config_time_warning(pytest.PytestConfigWarning(settings.warning), stacklevel=2)
    if settings.workers:
        if settings.gpus is not None:
            _plan_assignments(config, settings)
            settings.lock_dir = Path(tempfile.mkdtemp(prefix="pytest-torch-xdist-"))
            settings.owns_lock_dir = True
        config.pluginmanager.register(_Controller(settings), "torch_xdist_controller")
        return
    # no xdist: only an explicit count and a memory fraction apply
    settings.plan = threads.plan(settings.threads_setting, 0, cores, os.environ)
    if settings.plan.threads is not None:
        settings.applied = threads.apply(settings.plan.threads)
    if settings.fraction is not None and settings.gpus is not None:
        _apply_plain_fraction(settings, settings.gpus)


def _apply_plain_fraction(settings: XdistSettings, plan: GpuPlan) -> None:
    """Without xdist: the fraction caps this process on the current GPU (with
    --torch-xdist-gpus: the first listed), as one process alone on it."""
    from pytest_torch.core import devices
    from pytest_torch.xdist import gpus as gpu_plans

    device = f"{plan.kind}:{plan.indices[0]}"
    try:
        if isinstance(settings.fraction, float):
            fraction = settings.fraction
        else:
            fraction = gpu_plans.auto_fraction(devices.total_memory(device), 1, device)
        settings.fraction_before = devices.memory_fraction(device) or 1.0
        devices.set_memory_fraction(device, fraction)
    except gpu_plans.GpuSettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    except devices.DeviceSpecError as exc:
        raise pytest.UsageError(f"{FRACTION_SOURCE}: {exc}") from None
    settings.fraction = fraction
    settings.fraction_device = device


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
    workerinput: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]
    data = workerinput.get(ASSIGNMENT_KEY)
    if data is None:  # no GPU options
        return
    assignment = settings.assignment = gpu_plans.Assignment.from_dict(data)
    settings.gpus = gpu_plans.GpuPlan(assignment.kind, (assignment.gpu,))
    settings.fraction = assignment.fraction
    # where the GPU is in this process: 0 once narrowed (the usual case); its own index
    # where the environment did not arrive (a spec recreated by a future xdist)
    target = f"{assignment.kind}:{assignment.gpu}"
    if assignment.variable is not None:
        if os.environ.get(assignment.variable) == assignment.value:
            target = f"{assignment.kind}:0"
            settings.device = target
        else:
            settings.device = target
            devices.set_current_device(target)
    if assignment.fraction is not None:
        try:
            settings.fraction_before = devices.memory_fraction(target) or 1.0
            devices.set_memory_fraction(target, assignment.fraction)
        except devices.DeviceSpecError as exc:
            raise pytest.UsageError(f"{FRACTION_SOURCE}: {exc}") from None
        settings.fraction_device = target
    lock_dir = workerinput.get(LOCK_DIR_KEY)
    if lock_dir:
        from pytest_torch.xdist.locks import GpuLock

        settings.lock = GpuLock(Path(lock_dir), assignment.kind, assignment.gpu)


class _Controller:
    """Registered on the xdist controller only: narrows each worker's visible GPUs and
    hands it its assignment and the lock folder."""

    def __init__(self, settings: XdistSettings) -> None:
        self.settings = settings
        # by id() of the execnet spec: xdist restarts a crashed worker from the same spec
        # object (under a new id such as gw2), whose env keeps the crashed one's GPU
        self.by_spec: dict[int, Assignment] = {}

    def _assignment(self, spec: Any, position: int) -> Assignment | None:
        known = self.by_spec.get(id(spec))
        if known is not None or not self.settings.assignments:
            return known
        assignments = self.settings.assignments
        number = str(getattr(spec, "id", None) or "").removeprefix("gw")
        worker = int(number) if number.isdigit() else position
        assignment = self.by_spec[id(spec)] = assignments[worker % len(assignments)]
        return assignment

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        for position, spec in enumerate(specs):
            assignment = self._assignment(spec, position)
            if assignment is not None and assignment.variable is not None:
                # execnet sets these in the new process before it imports anything
                spec.env[assignment.variable] = assignment.value

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self.settings.lock_dir is not None:
            node.workerinput[LOCK_DIR_KEY] = str(self.settings.lock_dir)
        assignment = self._assignment(
            node.gateway.spec, _worker_number(node.workerinput.get("workerid"))
        )
        if assignment is not None:
            node.workerinput[ASSIGNMENT_KEY] = assignment._asdict()


def pytest_unconfigure(config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is None:
        return
    if settings.applied is not None:
        settings.applied.undo()
        settings.applied = None
    if settings.fraction_device is not None:
        from pytest_torch.core import devices

        devices.set_memory_fraction(settings.fraction_device, settings.fraction_before)
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
        lines = []
        if settings.plan is not None and settings.plan.threads is not None:
            lines.append(f"torch threads: {settings.plan.describe()} (--torch-num-threads)")
        if settings.fraction_device is not None and isinstance(settings.fraction, float):
            lines.append(
                f"torch GPU memory: {settings.fraction_device} capped at"
                f" {settings.fraction:.1%} of its memory (--torch-gpu-memory-fraction)"
            )
        return [*lines, *warning] if lines else None

    plan = threads.plan(settings.threads_setting, settings.workers, cores, os.environ)
    lines = [f"torch xdist: {settings.workers} workers, {cores} cores available"]
    for worker in range(settings.workers):
        gpu = "no GPU assigned"
        if settings.assignments:
            gpu = settings.assignments[worker % len(settings.assignments)].describe()
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


@pytest.hookimpl(wrapper=True)
def _runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    # every test, not only those whose torch_device is the GPU: a test that makes
    # tensors on "cuda" itself, or calls code that does, is invisible from here, and
    # must still never run beside an exclusive test
    lock = item.config.stash[settings_key].lock
    if lock is None:
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
