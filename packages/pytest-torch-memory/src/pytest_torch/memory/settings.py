"""The memory options of a session, read and checked once at start-up and kept in
``config.stash[settings_key]``.

A bad value stops the run with a usage error that names where it came from (the flag,
or the ini file) and what was expected.
"""

from __future__ import annotations

import pytest

from pytest_torch.core.options import int_option, option_or_ini, option_source
from pytest_torch.memory.leak_parameters import MAX_ITERATIONS, LeakCheck, parse_bytes
from pytest_torch.memory.results import MemoryResults


class MemorySettings:
    """The memory options of a session, and what its reports carried back."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(
        self, leak_all: bool, leak_defaults: LeakCheck, report_all: bool, top: int
    ) -> None:
        #: run the leak check on every test (--torch-leak-check)
        self.leak_all = leak_all
        #: the leak check of a test whose marker does not say otherwise
        self.leak_defaults = leak_defaults
        #: measure every test body's peak (--torch-memory-report)
        self.report_all = report_all
        #: tests per device in the end-of-run table
        self.top = top
        self.results = MemoryResults()


settings_key = pytest.StashKey[MemorySettings]()


def read_settings(config: pytest.Config) -> MemorySettings:
    """The session's memory options; ``pytest.UsageError`` for a bad value."""
    iterations = int_option(
        config,
        "torch_leak_iterations",
        "--torch-leak-iterations",
        minimum=2,
        maximum=MAX_ITERATIONS,
    )
    tensors = int_option(
        config, "torch_leak_tolerance_tensors", "--torch-leak-tolerance-tensors", minimum=0
    )
    try:
        tolerance_bytes = parse_bytes(
            option_or_ini(config, "torch_leak_tolerance_bytes"),
            option_source(config, "torch_leak_tolerance_bytes", "--torch-leak-tolerance-bytes"),
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    return MemorySettings(
        leak_all=bool(option_or_ini(config, "torch_leak_check")),
        leak_defaults=LeakCheck(iterations, tensors, tolerance_bytes),
        report_all=bool(option_or_ini(config, "torch_memory_report")),
        top=int_option(config, "torch_memory_top", "--torch-memory-top", minimum=0),
    )
