"""Per-test checks, each declared in one place, run by hooks that iterate them.

A check is what a marker asks of a test body (a latency budget, a compile budget, a
FLOP budget, a memory budget): a :class:`Check` says which marker asks for it, which
fixture a marked test must request, whether it can act on a ``unittest.TestCase``
method, how its marker is validated, and what it does around the body. A plugin lists
its checks in one :class:`Checks` and calls it from its hooks; the hooks hold no
per-check branches, so adding a check is its own module and one line in that list::

    CHECKS = Checks("torch_perf_runner", (LatencyBudget(), CompileBudget()))

    def pytest_configure(config):
        CHECKS.configure(config)

    def pytest_generate_tests(metafunc):
        CHECKS.collect(metafunc)

    def pytest_collection_modifyitems(config, items):
        CHECKS.collected(config, items)

The per-test hooks (:class:`CheckRunner`) are registered only once a collected test
asks for a check, so suites that never do pay nothing per test. Every check notes
whether it acted on each marked test (``reach``), so the end of the run names the
tests it could not check. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import pytest

from pytest_torch.core import reach
from pytest_torch.core.markers import MarkerSpec
from pytest_torch.core.ondemand import register_once
from pytest_torch.core.testkinds import is_unittest


class Check:
    """One per-test check; a subclass sets the class attributes and overrides what it
    needs (every method has a default that does nothing)."""

    #: the marker that asks for the check
    marker: MarkerSpec
    #: the fixture a marked test function must request, and how to use it (for the
    #: collection error); None where the check needs none
    fixture: str | None = None
    fixture_use: str = ""
    #: why the check cannot act on a unittest.TestCase method, told at the end of the
    #: run; None where it can
    unittest: str | None = None

    @property
    def label(self) -> str:
        return f"@pytest.mark.{self.marker.name}"

    def validate(self, node: pytest.Item | pytest.Metafunc) -> None:
        """Check the marker's arguments; ValueError naming the test for a bad one."""

    def collect(self, metafunc: pytest.Metafunc) -> None:
        """At collection of a marked test function: validate the marker and require the
        fixture; a collection error naming the test otherwise."""
        try:
            self.validate(metafunc)
        except ValueError as exc:
            raise pytest.Collector.CollectError(str(exc)) from None
        if self.fixture is not None and self.fixture not in metafunc.fixturenames:
            raise pytest.Collector.CollectError(
                f"{metafunc.definition.nodeid}: {self.label} needs the {self.fixture}"
                f" fixture: {self.fixture_use}"
            )

    def start(self, item: pytest.Item) -> Any:
        """Before the body of a test it acts on; what it returns is handed to
        :meth:`finish`."""
        return None

    def finish(self, item: pytest.Item, state: Any, raised: BaseException | None) -> str | None:
        """After the body (``raised``: what it raised, if anything); the failure message
        when the body passed but the check did not, else None. A body that raised keeps
        its own outcome: what is returned then is ignored."""
        return None

    def run_body(self, item: pytest.Function) -> bool:
        """Run the test body in place of pytest (True), or leave it to pytest (False)."""
        return False


class Checks:
    """A plugin's checks, for its hooks to iterate; ``runner`` names the per-test hooks'
    plugin, registered once the first collected test asks for one of them."""

    def __init__(self, runner: str, checks: Sequence[Check]) -> None:
        self.runner = runner
        self.checks = tuple(checks)

    def configure(self, config: pytest.Config) -> None:
        """Declare every check's marker."""
        for check in self.checks:
            check.marker.register(config)

    def asked(self, node: pytest.Item | pytest.Metafunc) -> list[Check]:
        """The checks a test's markers ask for, in declaration order."""
        return [check for check in self.checks if check.marker.mark_on(node) is not None]

    def collect(self, metafunc: pytest.Metafunc) -> None:
        """``pytest_generate_tests``: collect the checks a test function asks for."""
        asked = self.asked(metafunc)
        if asked:
            register_once(metafunc.config, self.runner, lambda: CheckRunner(self))
        for check in asked:
            check.collect(metafunc)

    def collected(self, config: pytest.Config, items: Sequence[pytest.Item]) -> None:
        """``pytest_collection_modifyitems``: unittest.TestCase methods never reach
        ``pytest_generate_tests``; their checks are seen here (and validated when the
        test runs)."""
        if any(is_unittest(item) and self.asked(item) for item in items):
            register_once(config, self.runner, lambda: CheckRunner(self))


class CheckRunner:
    """The per-test hooks of a plugin's checks."""

    def __init__(self, checks: Checks) -> None:
        self.checks = checks

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        started = _start(item, self.checks.asked(item))
        try:
            yield
        except BaseException as raised:
            for check, state in reversed(started):
                check.finish(item, state, raised)
            raise
        failures = [check.finish(item, state, None) for check, state in reversed(started)]
        failure = next((text for text in reversed(failures) if text is not None), None)
        if failure is not None:
            pytest.fail(failure, pytrace=False)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> bool | None:
        for check in self.checks.asked(pyfuncitem):
            if check.run_body(pyfuncitem):
                return True
        return None


def _start(item: pytest.Item, asked: list[Check]) -> list[tuple[Check, Any]]:
    """Start the checks that can act on the test, noting which acted; a malformed
    marker (seen here for unittest methods) fails the test after stopping those
    already started."""
    started: list[tuple[Check, Any]] = []
    unittest = is_unittest(item)
    for check in asked:
        if unittest and check.unittest is not None:
            reach.not_acted(item, check.label, check.unittest)
            continue
        try:
            check.validate(item)
            state = check.start(item)
        except (ValueError, pytest.fail.Exception) as problem:
            for done, done_state in reversed(started):
                done.finish(item, done_state, problem)
            message = str(problem) if isinstance(problem, ValueError) else problem.msg or ""
            pytest.fail(message, pytrace=False)
        reach.acted(item, check.label)
        started.append((check, state))
    return started
