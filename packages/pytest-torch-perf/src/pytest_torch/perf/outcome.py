"""What a perf check decided (:class:`Outcome`), the errors a failed one raises, and
turning an outcome into a pass, a skip or a failure of the test. Shared by every
engine and check; imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_torch.perf.records import PerfRecord


class PerfRegressionError(AssertionError):
    """A perf check failed: over its latency budget, or slower than its baseline."""


class PerfNotJudgedError(AssertionError):
    """With ``--torch-perf-strict``: a perf check that could not be made (no baseline for
    this machine, another thread count, a machine too busy to judge or to record on)."""


@dataclass
class Outcome:
    """What a check decided: "pass", "fail" or "skip", with the message."""

    status: str
    message: str
    record: PerfRecord
    #: the new baseline entry of a recording (the engine's entry type)
    baseline: Any = None
    #: what was measured (the engine's figures: a LatencyResult for the wall clock)
    measured: Any = None
    notes: list[str] = field(default_factory=list)
    #: False when the check could not be made (then "skip", or "fail" when strict)
    judged: bool = True

    def error(self) -> AssertionError:
        """What a failed check raises: never a regression when nothing was judged."""
        return (PerfRegressionError if self.judged else PerfNotJudgedError)(self.message)


def apply_outcome(outcome: Outcome) -> None:
    """Skip or fail the test as the outcome says; return for a pass."""
    __tracebackhide__ = True
    if outcome.status == "skip":
        pytest.skip(outcome.message)
    if outcome.status == "fail":
        raise outcome.error()
