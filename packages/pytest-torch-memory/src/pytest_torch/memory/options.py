"""The memory plugin's options: declared (each flag named once, with its ini twin) and
read into the session's :class:`~pytest_torch.memory.settings.MemorySettings`, or a
usage error that names where the bad value came from (the flag, or the ini file) and
what was expected. No torch here: this runs on every pytest start-up."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_torch.core.options import Option, checked, switch, whole
from pytest_torch.memory.leak_parameters import MAX_ITERATIONS, LeakCheck, parse_bytes
from pytest_torch.memory.settings import MemorySettings

#: the memory flags, each named once
LEAK_CHECK = "--torch-leak-check"
LEAK_ITERATIONS = "--torch-leak-iterations"
LEAK_TOLERANCE_TENSORS = "--torch-leak-tolerance-tensors"
LEAK_TOLERANCE_BYTES = "--torch-leak-tolerance-bytes"
MEMORY_REPORT = "--torch-memory-report"
MEMORY_TOP = "--torch-memory-top"

LEAK_CHECK_OPTION = Option(
    LEAK_CHECK,
    "torch_leak_check",
    "Run the leak check on every test, not only those marked torch_memory_leak.",
    parse=switch,
    kind="switch",
)
LEAK_ITERATIONS_OPTION = Option(
    LEAK_ITERATIONS,
    "torch_leak_iterations",
    "Runs after the warm-up in a leak check, unless the marker says otherwise.",
    parse=whole(minimum=2, maximum=MAX_ITERATIONS),
    default="5",
    metavar="N",
)
LEAK_TOLERANCE_TENSORS_OPTION = Option(
    LEAK_TOLERANCE_TENSORS,
    "torch_leak_tolerance_tensors",
    "Live tensors a run may add without counting as a leak.",
    parse=whole(minimum=0),
    default="0",
    metavar="N",
)
LEAK_TOLERANCE_BYTES_OPTION = Option(
    LEAK_TOLERANCE_BYTES,
    "torch_leak_tolerance_bytes",
    "Bytes a run may add on a device without counting as a leak (e.g. 64KiB).",
    parse=checked(parse_bytes),
    default="0",
    metavar="BYTES",
)
MEMORY_REPORT_OPTION = Option(
    MEMORY_REPORT,
    "torch_memory_report",
    "Measure the peak memory of every test body, not only budgeted ones.",
    parse=switch,
    kind="switch",
)
MEMORY_TOP_OPTION = Option(
    MEMORY_TOP,
    "torch_memory_top",
    "Tests per device in the end-of-run peak-memory table (0: no table).",
    parse=whole(minimum=0),
    default="10",
    metavar="N",
)
#: in ``--help`` order
OPTIONS: tuple[Option[Any], ...] = (
    LEAK_CHECK_OPTION,
    LEAK_ITERATIONS_OPTION,
    LEAK_TOLERANCE_TENSORS_OPTION,
    LEAK_TOLERANCE_BYTES_OPTION,
    MEMORY_REPORT_OPTION,
    MEMORY_TOP_OPTION,
)


def add_options(parser: pytest.Parser) -> None:
    """Declare the memory options, each with its ini twin, in one ``--help`` group."""
    group = parser.getgroup("torch-memory", "torch-memory: peak-memory budgets and leak checks")
    for option in OPTIONS:
        option.add(parser, group)


def read_settings(config: pytest.Config) -> MemorySettings:
    """The session's memory options; ``pytest.UsageError`` for a bad value."""
    leak_defaults = LeakCheck(
        LEAK_ITERATIONS_OPTION.read(config),
        LEAK_TOLERANCE_TENSORS_OPTION.read(config),
        LEAK_TOLERANCE_BYTES_OPTION.read(config),
    )
    return MemorySettings(
        leak_all=LEAK_CHECK_OPTION.read(config),
        leak_defaults=leak_defaults,
        report_all=MEMORY_REPORT_OPTION.read(config),
        top=MEMORY_TOP_OPTION.read(config),
    )
