"""Deterministic mode applied to the tests ``--torch-deterministic`` acts on (those
that use ``torch_seed``): switched on when the test is seeded and put back at its
teardown, told in its report so that the xdist controller can count it, and counted
for the end of the run and the header. Torch is imported only when a test is seeded.
"""

from __future__ import annotations

import pytest

from pytest_torch.determinism import flags
from pytest_torch.determinism.options import DETERMINISTIC
from pytest_torch.determinism.settings import DeterminismSettings
from pytest_torch.determinism.state import DeterminismSession

#: set on a test for which --torch-deterministic turned deterministic mode on
applied_key = pytest.StashKey[bool]()
#: the setup report's attribute that says so (a plain attribute travels through xdist)
REPORT_ATTRIBUTE = "torch_deterministic_applied"


def apply(item: pytest.Item, settings: DeterminismSettings) -> None:
    """Deterministic mode for this seeded test, put back at its teardown."""
    before = flags.current()
    flags.apply(flags.deterministic(warn_only=settings.warn_only))
    item.stash[applied_key] = True
    item.addfinalizer(lambda: flags.apply(before))


def applied_to(item: pytest.Item) -> bool:
    return item.stash.get(applied_key, False)


def mark_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Say on the setup report of a test it was applied to that it was."""
    if report.when == "setup" and applied_to(item):
        report.__dict__[REPORT_ATTRIBUTE] = True


class AppliedCounter:
    """Counts the tests set up in this run and those --torch-deterministic acted on (the
    xdist controller counts its workers' reports), for core's end-of-run section."""

    def __init__(self, state: DeterminismSession) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            self.state.tests += 1
            self.state.applied += bool(getattr(report, REPORT_ATTRIBUTE, False))

    def pytest_torch_reach_lines(self, config: pytest.Config) -> list[str] | None:
        if not self.state.tests:
            return None
        return [applied_line(self.state.applied, self.state.tests)]


def applied_line(applied: int, tests: int) -> str:
    """The end-of-run line on how many tests --torch-deterministic acted on."""
    if applied:
        return (
            f"torch: {DETERMINISTIC} applied to {applied} of {tests} tests (those using torch_seed)"
        )
    return (
        f"torch: {DETERMINISTIC} applied to none of the {tests} tests: it acts on tests"
        " that use the torch_seed fixture, and none of these did, so this run was not made"
        " deterministic. Request torch_seed in the tests to check (in a module:"
        ' pytestmark = pytest.mark.usefixtures("torch_seed"); for a whole suite: an autouse'
        " fixture in conftest.py that requests it)."
    )


def header_lines(settings: DeterminismSettings, state: DeterminismSession) -> list[str] | None:
    """The report header's lines: deterministic mode, and CUBLAS_WORKSPACE_CONFIG."""
    if not settings.enabled:
        return None
    mode = " (warn only)" if settings.warn_only else ""
    lines = [f"torch: deterministic algorithms{mode} for tests using torch_seed"]
    if state.cublas_line is not None:
        lines.append(f"torch: {state.cublas_line}")
    return lines
