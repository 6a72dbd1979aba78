"""What each process of a run gets: its GPU, memory fraction and thread share.

The controller (or a plain run without xdist) reads the options, decides which GPU and
memory fraction each worker gets (:class:`~pytest_torch.xdist.gpus.Assignment`), which
visibility variable narrows each worker to its GPU, and makes the folder of the per-GPU
locks. Each worker applies its thread share and its assignment. Every change made here
is recorded in :class:`~pytest_torch.xdist.settings.XdistSettings` and undone by
:func:`undo`. Nothing here imports
torch or needs pytest: errors are :class:`~pytest_torch.xdist.gpus.GpuSettingError`,
which the plugin turns into usage errors.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_torch.core import devices
from pytest_torch.xdist import gpus, threads
from pytest_torch.xdist.gpus import Assignment, GpuPlan, GpuSettingError
from pytest_torch.xdist.locks import GpuLock
from pytest_torch.xdist.settings import XdistSettings

#: keys of the controller's gifts in each worker's ``workerinput``
LOCK_DIR_KEY = "torch_xdist_lock_dir"
ASSIGNMENT_KEY = "torch_xdist_assignment"


def worker_number(workerid: object) -> int:
    """``gw3`` -> 3; an id of the user's own (``--tx id=x//popen``) -> 0."""
    number = str(workerid).removeprefix("gw")
    return int(number) if number.isdigit() else 0


def count_workers(numprocesses: object, tx_specs: Iterable[object]) -> int:
    """How many workers ``-n`` or the ``--tx`` specs start (0: none)."""
    if isinstance(numprocesses, int) and numprocesses > 0:
        return numprocesses
    count = 0
    for spec in tx_specs:  # "2*popen" is two workers
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def configure_main(
    settings: XdistSettings,
    *,
    gpu_list: object,
    fraction: object,
    gpus_source: str,
    fraction_source: str,
    tx_specs: Iterable[object],
    cores: int,
    warn: Callable[[str], None],
    environ: Mapping[str, str] = os.environ,
) -> None:
    """The controller's (or, without xdist, the only process's) set-up. ``gpu_list``
    and ``fraction`` are the option values (None: not given); ``warn`` reports a
    configuration warning (too many threads for the cores)."""
    _read_gpu_options(settings, gpu_list, fraction, gpus_source, fraction_source)
    settings.warning = threads.oversubscription(settings.threads_setting, settings.workers, cores)
    if settings.warning is not None:  # in the header, and in the summary for -q runs
        warn(settings.warning)
    if settings.workers:
        if settings.gpus is not None:
            settings.assignments = plan_assignments(settings, tx_specs, gpus_source, environ)
            settings.lock_dir = Path(tempfile.mkdtemp(prefix="pytest-torch-xdist-"))
            settings.owns_lock_dir = True
        return
    # no xdist: only an explicit count and a memory fraction apply
    settings.plan = threads.plan(settings.threads_setting, 0, cores, environ)
    if settings.plan.threads is not None:
        settings.applied = threads.apply(settings.plan.threads)
    if settings.fraction is not None and settings.gpus is not None:
        _apply_plain_fraction(settings, settings.gpus, fraction_source)


def _read_gpu_options(
    settings: XdistSettings,
    gpu_list: object,
    fraction: object,
    gpus_source: str,
    fraction_source: str,
) -> None:
    if gpu_list is None and fraction is None:
        return
    if fraction is not None:
        settings.fraction = gpus.parse_fraction(fraction, fraction_source)
    if gpu_list is None:  # a fraction alone: the current GPU, every GPU stays visible
        plan = gpus.parse_gpus("auto", fraction_source)
        current = devices.default_device(plan.kind).index or 0
        settings.gpus = plan._replace(indices=(current,))
    else:
        settings.gpus = gpus.parse_gpus(gpu_list, gpus_source)
        settings.narrow = True


def plan_assignments(
    settings: XdistSettings,
    tx_specs: Iterable[object],
    gpus_source: str,
    environ: Mapping[str, str] = os.environ,
) -> list[Assignment]:
    """The controller's decision for each worker; :class:`GpuSettingError` when it
    cannot work (a share too small, a spec that narrows the GPUs itself)."""
    plan = settings.gpus
    assert plan is not None
    variable = gpus.VISIBILITY_VARIABLES[plan.kind] if settings.narrow else None
    if variable is not None:
        for spec in tx_specs:
            if f"env:{variable}=" in str(spec):
                raise GpuSettingError(
                    f"--tx {spec}: this worker spec sets {variable} itself, and"
                    f" {gpus_source} sets it for every worker to give each its GPU. Drop"
                    f" env:{variable} from the spec, or drop --torch-xdist-gpus and choose"
                    " the GPUs in your specs."
                )
    fractions: dict[int, float] = {}
    for index in sorted(set(plan.indices)):
        sharing = plan.sharing(index, settings.workers)
        if settings.fraction is None or not sharing:
            continue
        if settings.fraction == "auto":
            device = f"{plan.kind}:{index}"
            fractions[index] = gpus.auto_fraction(devices.total_memory(device), sharing, device)
        else:
            fractions[index] = float(settings.fraction)
    outer = environ.get(variable) if variable is not None else None
    assignments = []
    for worker in range(settings.workers):
        index = plan.index_for(worker)
        value = None if variable is None else gpus.visible_value(plan.kind, index, outer)
        assignments.append(Assignment(plan.kind, index, variable, value, fractions.get(index)))
    return assignments


def _set_fraction(settings: XdistSettings, device: str, fraction: float, source: str) -> None:
    """Cap this process at ``fraction`` of ``device``, remembering what to restore."""
    try:
        settings.fraction_before = devices.memory_fraction(device) or 1.0
        devices.set_memory_fraction(device, fraction)
    except devices.DeviceSpecError as exc:
        raise GpuSettingError(f"{source}: {exc}") from None
    settings.fraction_device = device


def _apply_plain_fraction(settings: XdistSettings, plan: GpuPlan, source: str) -> None:
    """Without xdist: the fraction caps this process on the current GPU (with
    --torch-xdist-gpus: the first listed), as one process alone on it."""
    device = f"{plan.kind}:{plan.indices[0]}"
    if isinstance(settings.fraction, float):
        fraction = settings.fraction
    else:
        try:
            fraction = gpus.auto_fraction(devices.total_memory(device), 1, device)
        except devices.DeviceSpecError as exc:
            raise GpuSettingError(f"{source}: {exc}") from None
    _set_fraction(settings, device, fraction, source)
    settings.fraction = fraction


def configure_worker(
    settings: XdistSettings,
    workerinput: Mapping[str, Any],
    *,
    fraction_source: str,
    cores: int,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """A worker's set-up: its thread share, then what the controller assigned it."""
    assert settings.worker is not None
    settings.plan = threads.plan(settings.threads_setting, settings.workers, cores, environ)
    if settings.plan.threads is not None:
        settings.applied = threads.apply(settings.plan.threads, interop=True)
    data = workerinput.get(ASSIGNMENT_KEY)
    if data is None:  # no GPU options
        return
    assignment = settings.assignment = Assignment.from_dict(data)
    settings.gpus = GpuPlan(assignment.kind, (assignment.gpu,))
    settings.fraction = assignment.fraction
    # where the GPU is in this process: 0 once narrowed (the usual case); its own index
    # where the environment did not arrive (a spec recreated by a future xdist)
    target = f"{assignment.kind}:{assignment.gpu}"
    if assignment.variable is not None:
        if environ.get(assignment.variable) == assignment.value:
            target = f"{assignment.kind}:0"
            settings.device = target
        else:
            settings.device = target
            devices.set_current_device(target)
    if assignment.fraction is not None:
        _set_fraction(settings, target, assignment.fraction, fraction_source)
    lock_dir = workerinput.get(LOCK_DIR_KEY)
    if lock_dir:
        settings.lock = GpuLock(Path(lock_dir), assignment.kind, assignment.gpu)


class SpecAssignments:
    """The controller's assignment for each execnet spec, kept by the spec object:
    xdist restarts a crashed worker from the same spec (under a new id such as gw2),
    whose environment keeps the crashed one's GPU, so the new worker gets that GPU."""

    def __init__(self, assignments: list[Assignment]) -> None:
        self.assignments = assignments
        self.by_spec: dict[int, Assignment] = {}  # by id() of the spec

    def for_spec(self, spec: object, position: int) -> Assignment | None:
        """The assignment of ``spec``, the ``position``-th spec (used when its id is
        not ``gw<n>``); None without GPU options."""
        known = self.by_spec.get(id(spec))
        if known is not None or not self.assignments:
            return known
        number = str(getattr(spec, "id", None) or "").removeprefix("gw")
        worker = int(number) if number.isdigit() else position
        assignment = self.by_spec[id(spec)] = self.assignments[worker % len(self.assignments)]
        return assignment


def undo(settings: XdistSettings) -> None:
    """Put back every change of start-up: threads, environment, memory cap, lock folder."""
    if settings.applied is not None:
        settings.applied.undo()
        settings.applied = None
    if settings.fraction_device is not None:
        devices.set_memory_fraction(settings.fraction_device, settings.fraction_before)
        settings.fraction_device = None
    if settings.owns_lock_dir and settings.lock_dir is not None:
        shutil.rmtree(settings.lock_dir, ignore_errors=True)
        settings.owns_lock_dir = False


def header_lines(
    settings: XdistSettings, cores: int, environ: Mapping[str, str] = os.environ
) -> list[str] | None:
    """The report header of the controller or a plain run: what each worker gets."""
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

    plan = threads.plan(settings.threads_setting, settings.workers, cores, environ)
    lines = [f"torch xdist: {settings.workers} workers, {cores} cores available"]
    for worker in range(settings.workers):
        gpu = "no GPU assigned"
        if settings.assignments:
            gpu = settings.assignments[worker % len(settings.assignments)].describe()
        lines.append(f"  gw{worker}: {gpu}, {plan.describe()}")
    return lines + warning
