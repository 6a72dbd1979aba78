"""The xdist plugin's options: declared (each flag named once, with its ini twin) and
read into the session's :class:`~pytest_torch.xdist.settings.XdistSettings`, with
pytest-xdist's own ``-n`` and ``--tx``. A bad value is a usage error that names where
it came from; a GPU list is checked against the machine later (:mod:`.workers`). No
torch here: this runs on every pytest start-up."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_torch.core.options import Option, checked, unparsed
from pytest_torch.xdist.settings import XdistSettings

#: the xdist flags, each named once
XDIST_GPUS = "--torch-xdist-gpus"
GPU_MEMORY_FRACTION = "--torch-gpu-memory-fraction"
NUM_THREADS = "--torch-num-threads"


class ThreadSettingError(ValueError):
    """A --torch-num-threads value that is not auto, none or a positive count."""


def parse_threads(value: object, source: str) -> str | int:
    """``"auto"``, ``"none"`` or a positive count."""
    text = str(value).strip().lower()
    if text in ("auto", "none"):
        return text
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ThreadSettingError(
            f"{source}: expected auto, none or a positive number of threads, got {value!r}."
            f" Example: {NUM_THREADS}=auto"
        )
    return count


def parse_fraction(value: object, source: str) -> float | str | None:
    """``"auto"``, a number in (0, 1], or None (not given)."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        fraction = float(text)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise ValueError(
            f"{source}: expected auto or a fraction of GPU memory in (0, 1], got {value!r}."
            f" Example: {GPU_MEMORY_FRACTION}=0.45"
        )
    return fraction


XDIST_GPUS_OPTION = Option(
    XDIST_GPUS,
    "torch_xdist_gpus",
    "Spread xdist workers round-robin over these accelerator devices (CUDA, XPU, or the"
    " PrivateUse1 backend torch reports): 0,1 or auto (all visible).",
    parse=unparsed,  # checked against the GPUs the machine has, by the controller
    metavar="LIST",
)
GPU_MEMORY_FRACTION_OPTION = Option(
    GPU_MEMORY_FRACTION,
    "torch_gpu_memory_fraction",
    "Cap each worker's share of its accelerator device's memory: auto (split between the"
    " workers sharing it) or a number in (0, 1].",
    parse=checked(parse_fraction),
    metavar="FRACTION",
)
NUM_THREADS_OPTION = Option(
    NUM_THREADS,
    "torch_num_threads",
    "torch threads per process: auto (each xdist worker gets its share of the cores), a"
    " number, or none (torch's default). OMP_NUM_THREADS/MKL_NUM_THREADS set by you are"
    " left alone.",
    parse=checked(parse_threads),
    default="auto",
    metavar="N",
)
#: in ``--help`` order
OPTIONS: tuple[Option[Any], ...] = (
    XDIST_GPUS_OPTION,
    GPU_MEMORY_FRACTION_OPTION,
    NUM_THREADS_OPTION,
)


def add_options(parser: pytest.Parser) -> None:
    """Declare the xdist options, each with its ini twin, in one ``--help`` group."""
    group = parser.getgroup("torch-xdist", "torch-xdist: GPUs and CPU cores shared by workers")
    for option in OPTIONS:
        option.add(parser, group)


def worker_number(workerid: object) -> int:
    """``gw3`` -> 3; an id of the user's own (``--tx id=x//popen``) -> 0."""
    number = str(workerid).removeprefix("gw")
    return int(number) if number.isdigit() else 0


def count_workers(numprocesses: object, tx_specs: tuple[str, ...] | list[object]) -> int:
    """How many workers ``-n`` or the ``--tx`` specs start (0: none)."""
    if isinstance(numprocesses, int) and numprocesses > 0:
        return numprocesses
    count = 0
    for spec in tx_specs:  # "2*popen" is two workers
        times, star, _ = str(spec).partition("*")
        count += int(times) if star and times.isdigit() else 1
    return count


def read_settings(config: pytest.Config) -> XdistSettings:
    """The session's xdist options, and this process's place in the run (controller,
    worker, or a run without xdist); ``pytest.UsageError`` for a bad value."""
    threads = NUM_THREADS_OPTION.read(config)
    tx_specs = tuple(str(spec) for spec in config.getoption("tx", default=None) or ())
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        workers = int(workerinput.get("workercount", 1))
    elif config.pluginmanager.hasplugin("xdist"):
        workers = count_workers(config.getoption("numprocesses", default=None), tx_specs)
    else:
        workers = 0
    return XdistSettings(
        threads=threads,
        workers=workers,
        worker=None if workerinput is None else worker_number(workerinput["workerid"]),
        gpus=XDIST_GPUS_OPTION.read(config),
        fraction=GPU_MEMORY_FRACTION_OPTION.read(config),
        tx_specs=tx_specs,
        gpus_source=XDIST_GPUS_OPTION.source(config),
        fraction_source=GPU_MEMORY_FRACTION_OPTION.source(config),
    )
