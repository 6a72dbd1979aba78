"""What each process of a run gets: its GPU, memory fraction and thread share.

The controller (or a plain run without xdist) checks the GPU options against the
machine, decides which GPU and memory fraction each worker gets
(:class:`~pytest_torch.xdist.gpus.Assignment`), which visibility variable narrows each
worker to its GPU, and makes the folder of the per-GPU locks. Each worker applies its
thread share and its assignment. Every change made here is recorded in
:class:`~pytest_torch.xdist.state.XdistSession` and undone by :func:`undo`. Nothing here
imports torch or needs pytest: errors are :class:`~pytest_torch.xdist.gpus.GpuSettingError`,
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
from pytest_torch.xdist.options import GPU_MEMORY_FRACTION, NUM_THREADS, XDIST_GPUS
from pytest_torch.xdist.state import XdistSession

#: keys of the controller's gifts in each worker's ``workerinput``
LOCK_DIR_KEY = "torch_xdist_lock_dir"
ASSIGNMENT_KEY = "torch_xdist_assignment"


def configure_main(
    session: XdistSession,
    *,
    cores: int,
    warn: Callable[[str], None],
    environ: Mapping[str, str] = os.environ,
) -> None:
    """The controller's (or, without xdist, the only process's) set-up; ``warn``
    reports a configuration warning (too many threads for the cores)."""
    settings = session.settings
    _read_gpu_options(session)
    session.warning = threads.oversubscription(settings.threads, settings.workers, cores)
    if session.warning is not None:  # in the header, and in the summary for -q runs
        warn(session.warning)
    if settings.workers:
        if session.gpus is not None:
            session.assignments = plan_assignments(
                session, settings.tx_specs, settings.gpus_source, environ
            )
            session.lock_dir = Path(tempfile.mkdtemp(prefix="pytest-torch-xdist-"))
            session.owns_lock_dir = True
        return
    # no xdist: only an explicit count and a memory fraction apply
    session.plan = threads.plan(settings.threads, 0, cores, environ)
    if session.plan.threads is not None:
        session.applied = threads.apply(session.plan.threads)
    if session.fraction is not None and session.gpus is not None:
        _apply_plain_fraction(session, session.gpus, settings.fraction_source)


def _read_gpu_options(session: XdistSession) -> None:
    """The GPU list checked against the machine (a fraction alone: the current GPU)."""
    settings = session.settings
    if settings.gpus is None and settings.fraction is None:
        return
    if settings.gpus is None:  # a fraction alone: the current GPU, every GPU stays visible
        plan = gpus.parse_gpus("auto", settings.fraction_source)
        current = devices.default_device(plan.kind).index or 0
        session.gpus = plan._replace(indices=(current,))
    else:
        session.gpus = gpus.parse_gpus(settings.gpus, settings.gpus_source)
        session.narrow = True


def plan_assignments(
    session: XdistSession,
    tx_specs: Iterable[object],
    gpus_source: str,
    environ: Mapping[str, str] = os.environ,
) -> list[Assignment]:
    """The controller's decision for each worker; :class:`GpuSettingError` when it
    cannot work (a share too small, a spec that narrows the GPUs itself)."""
    plan = session.gpus
    assert plan is not None
    variable = gpus.VISIBILITY_VARIABLES.get(plan.kind) if session.narrow else None
    if variable is not None:
        for spec in tx_specs:
            if f"env:{variable}=" in str(spec):
                raise GpuSettingError(
                    f"--tx {spec}: this worker spec sets {variable} itself, and"
                    f" {gpus_source} sets it for every worker to give each its GPU. Drop"
                    f" env:{variable} from the spec, or drop {XDIST_GPUS} and choose"
                    " the GPUs in your specs."
                )
    workers = session.settings.workers
    fractions: dict[int, float] = {}
    for index in sorted(set(plan.indices)):
        sharing = plan.sharing(index, workers)
        if session.fraction is None or not sharing:
            continue
        if session.fraction == "auto":
            device = f"{plan.kind}:{index}"
            fractions[index] = gpus.auto_fraction(devices.total_memory(device), sharing, device)
        else:
            fractions[index] = float(session.fraction)
    outer = environ.get(variable) if variable is not None else None
    assignments = []
    for worker in range(workers):
        index = plan.index_for(worker)
        value = None if variable is None else gpus.visible_value(plan.kind, index, outer)
        assignments.append(Assignment(plan.kind, index, variable, value, fractions.get(index)))
    return assignments


def _set_fraction(session: XdistSession, device: str, fraction: float, source: str) -> None:
    """Cap this process at ``fraction`` of ``device``, remembering what to restore."""
    try:
        session.fraction_before = devices.memory_fraction(device) or 1.0
        devices.set_memory_fraction(device, fraction)
    except devices.DeviceSpecError as exc:
        raise GpuSettingError(f"{source}: {exc}") from None
    session.fraction_device = device


def _apply_plain_fraction(session: XdistSession, plan: GpuPlan, source: str) -> None:
    """Without xdist: the fraction caps this process on the current GPU (with
    --torch-xdist-gpus: the first listed), as one process alone on it."""
    device = f"{plan.kind}:{plan.indices[0]}"
    if isinstance(session.fraction, float):
        fraction = session.fraction
    else:
        try:
            fraction = gpus.auto_fraction(devices.total_memory(device), 1, device)
        except devices.DeviceSpecError as exc:
            raise GpuSettingError(f"{source}: {exc}") from None
    _set_fraction(session, device, fraction, source)
    session.fraction = fraction


def configure_worker(
    session: XdistSession,
    workerinput: Mapping[str, Any],
    *,
    cores: int,
    environ: Mapping[str, str] = os.environ,
) -> None:
    """A worker's set-up: its thread share, then what the controller assigned it."""
    settings = session.settings
    assert settings.worker is not None
    session.plan = threads.plan(settings.threads, settings.workers, cores, environ)
    if session.plan.threads is not None:
        session.applied = threads.apply(session.plan.threads, interop=True)
    data = workerinput.get(ASSIGNMENT_KEY)
    if data is None:  # no GPU options
        return
    assignment = session.assignment = Assignment.from_dict(data)
    session.gpus = GpuPlan(assignment.kind, (assignment.gpu,))
    session.fraction = assignment.fraction
    # where the GPU is in this process: 0 once narrowed (the usual case); its own index
    # where the environment did not arrive (a spec recreated by a future xdist)
    target = f"{assignment.kind}:{assignment.gpu}"
    if assignment.variable is not None:
        if environ.get(assignment.variable) == assignment.value:
            target = f"{assignment.kind}:0"
            session.device = target
        else:
            session.device = target
            devices.set_current_device(target)
    elif assignment.kind not in gpus.VISIBILITY_VARIABLES:
        # no variable narrows this type: the device becomes the worker's current one,
        # where work on a bare "<type>" goes
        session.device = target
        session.device_before = str(devices.default_device(assignment.kind))
        devices.set_current_device(target)
    if assignment.fraction is not None:
        _set_fraction(session, target, assignment.fraction, settings.fraction_source)
    lock_dir = workerinput.get(LOCK_DIR_KEY)
    if lock_dir:
        session.lock = GpuLock(Path(lock_dir), assignment.kind, assignment.gpu)


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


def undo(session: XdistSession) -> None:
    """Put back every change of start-up: threads, environment, memory cap, lock folder."""
    if session.applied is not None:
        session.applied.undo()
        session.applied = None
    if session.fraction_device is not None:
        devices.set_memory_fraction(session.fraction_device, session.fraction_before)
        session.fraction_device = None
    if session.device_before is not None:
        devices.set_current_device(session.device_before)
        session.device_before = None
    if session.owns_lock_dir and session.lock_dir is not None:
        shutil.rmtree(session.lock_dir, ignore_errors=True)
        session.owns_lock_dir = False


def header_lines(
    session: XdistSession, cores: int, environ: Mapping[str, str] = os.environ
) -> list[str] | None:
    """The report header of the controller or a plain run: what each worker gets."""
    settings = session.settings
    warning = [] if session.warning is None else [f"  WARNING: {session.warning}"]
    if not settings.workers:
        lines = []
        if session.plan is not None and session.plan.threads is not None:
            lines.append(f"torch threads: {session.plan.describe()} ({NUM_THREADS})")
        if session.fraction_device is not None and isinstance(session.fraction, float):
            lines.append(
                f"torch GPU memory: {session.fraction_device} capped at"
                f" {session.fraction:.1%} of its memory ({GPU_MEMORY_FRACTION})"
            )
        return [*lines, *warning] if lines else None

    plan = threads.plan(settings.threads, settings.workers, cores, environ)
    lines = [f"torch xdist: {settings.workers} workers, {cores} cores available"]
    for worker in range(settings.workers):
        gpu = "no GPU assigned"
        if session.assignments:
            gpu = session.assignments[worker % len(session.assignments)].describe()
        lines.append(f"  gw{worker}: {gpu}, {plan.describe()}")
    return lines + warning
