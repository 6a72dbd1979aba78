"""The leak check's runner: the test's body replaced by one that runs it once to warm
up and then the check's iterations, with the same fixture values.

The body is the item's ``obj``, replaced for the test's call: pytest calls it for a
test function, and sets it on the test case for a ``unittest.TestCase`` method, which
unittest then calls between ``setUp`` and ``tearDown`` (so those run once around all the
runs). A test the check cannot repeat (an async body, a body perf times, an item
with no Python body) is noted in core's reach ledger, which the end of the run reports.

The engine is :func:`pytest_torch.memory.leaks.check_for_leaks`; this module decides
whether a test gets the check and wraps its body for it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core import reach, seeding
from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.rerun import rerun_command
from pytest_torch.core.testkinds import is_async, is_unittest, kind_of
from pytest_torch.memory.asked import leak_check_of, runs_once
from pytest_torch.memory.leaks import examine
from pytest_torch.memory.markers import LEAK
from pytest_torch.memory.measured_devices import devices_to_measure
from pytest_torch.memory.options import LEAK_CHECK
from pytest_torch.memory.results import LEAK_PROPERTY
from pytest_torch.memory.subtest_echoes import reported_once

if TYPE_CHECKING:
    from pytest_torch.memory.leak_parameters import LeakCheck
    from pytest_torch.memory.settings import MemorySettings


class RaisedInRun:
    """A run after the first raised: which one, and what the runs drew at random."""

    def __init__(self, run: int, iterations: int, drawn: list[str], error: str) -> None:
        self.run = run
        self.iterations = iterations
        #: the global generators the body drew from ("torch's CPU generator")
        self.drawn = drawn
        #: the type of what it raised
        self.error = error


RAISED_IN_RUN = pytest.StashKey[RaisedInRun]()


def check_name(item: pytest.Item) -> str:
    """How the test asked for the check: its marker, or the run-wide switch."""
    return f"@pytest.mark.{LEAK.name}" if LEAK.mark_on(item) is not None else LEAK_CHECK


def raised_in_run(item: pytest.Item) -> str | None:
    """The report's section for a test whose body raised in a run after the first under
    the leak check (None otherwise): the user's error is not the check's, but it would
    not have happened in a plain run."""
    found = item.stash.get(RAISED_IN_RUN, None)
    if found is None:
        return None
    run, iterations = found.run, found.iterations
    marked = LEAK.mark_on(item) is not None
    how = (
        f"@pytest.mark.{LEAK.name} runs this test's body"
        if marked
        else f"{LEAK_CHECK} runs every test's body"
    )
    unittest = is_unittest(item)
    same = (
        "the same test case (setUp ran once before them)"
        if unittest
        else "the same fixture values (the same tmp_path folder, with what earlier runs wrote)"
    )
    lines = [
        f"{how} up to {iterations + 1} times to watch its memory (once to warm up, then"
        f" until a run leaves no more behind than the one before, at most {iterations}),"
        f" and one more, traced, when it leaks. Run {run} raised the error"
        f" above; the {'first run' if run == 2 else f'first {run - 1} runs'} passed. A run"
        " without the check runs it once.",
        f"Every run gets {same} and starts from the same random state as the first, so"
        " what differs is state the body changes and keeps: a global or module attribute,"
        " a class attribute, a cache, a counter, a file it wrote, a generator of its own"
        " (torch.Generator, numpy.random.default_rng) made outside the body.",
    ]
    if found.error == "FileExistsError":
        lines.append(
            "The error is a file that already exists: an earlier run wrote it, and every run"
            " writes into the same folder. Write into a fresh folder inside the body"
            " (tempfile.mkdtemp(dir=tmp_path)), or allow an existing file."
        )
    if found.drawn and "torch_seed" not in getattr(item, "fixturenames", ()):
        lines.append(
            f"This test draws random numbers ({', '.join(found.drawn)}) without torch_seed:"
            " its draws come from whatever state earlier tests left, so in another order a"
            " plain run may fail the same way. Request torch_seed to draw the same values"
            " in every run and order."
        )
    if not marked:
        command = rerun_command(item.config, plain_nodeid(item))
        lines.append(f"Run it as before with: {command} (without {LEAK_CHECK})")
    return "\n".join(lines)


#: why the check cannot repeat a test, by kind; each completes "N tests: ..."
CANNOT_REPEAT_ASYNC = (
    "the body is a coroutine, run by its own event loop (an async plugin,"
    " IsolatedAsyncioTestCase), which the check cannot repeat; check the step with"
    " assert_no_memory_leak(lambda: asyncio.run(step()))"
)


def leak_check_to_run(item: pytest.Item, settings: MemorySettings) -> LeakCheck | None:
    """The leak check this test's body gets, or None: not asked for, or a body the check
    cannot repeat (noted in core's reach ledger, with why): an item without a Python
    body, a body that must run once (e.g. perf times it; only reached by
    ``--torch-leak-check``, a marker on such a test is a collection error), an async
    body. ValueError for a malformed marker (a collection error, except on unittest
    methods, which pytest never shows to ``pytest_generate_tests``)."""
    check = leak_check_of(item, settings)
    if check is None:
        return None
    name = check_name(item)
    if not isinstance(item, pytest.Function):
        reach.not_acted(item, name, f"no Python test body to repeat ({kind_of(item)})")
        return None
    why = runs_once(item.config, item.nodeid, getattr(item, "fixturenames", ()))
    if why is not None:
        reach.not_acted(
            item,
            name,
            f"the body must run once ({why}): repeating it would distort what it measures;"
            " check the step for leaks in a test of its own",
        )
        return None
    if is_async(item):
        reach.not_acted(item, name, CANNOT_REPEAT_ASYNC)
        return None
    reach.acted(item, name)
    return check


@contextlib.contextmanager
def repeated(item: pytest.Item, settings: MemorySettings) -> Iterator[None]:
    """For the leak check: the test's body (its ``obj``, which pytest calls for a test
    function and hands unittest for a ``unittest.TestCase`` method) replaced by the
    repeating one within the block, and put back after; nothing replaced where no check
    was asked for, or one that cannot act (noted with why). A malformed marker (of a
    unittest method, never seen at collection) fails the test."""
    if not settings.leak_all and LEAK.mark_on(item) is None:
        yield
        return
    try:
        check = leak_check_to_run(item, settings)
    except ValueError as exc:
        reach.not_acted(item, check_name(item), "a malformed marker (the test failed, saying why)")
        raise pytest.fail.Exception(str(exc), pytrace=False) from None
    if check is None:
        yield
        return
    assert isinstance(item, pytest.Function)  # leak_check_to_run says so
    original = item.obj
    item.obj = repeating_body(item, check)
    try:
        yield
    finally:
        item.obj = original


def repeating_body(item: pytest.Function, check: LeakCheck) -> Callable[..., None]:
    """The test's body (its ``obj``), run repeatedly and failing the test with the leak
    report (also kept in its ``user_properties``) when every run left more behind."""
    original = item.obj
    accelerators = [d for d in devices_to_measure(item, None) if d.type != "cpu"]
    root = str(item.config.rootpath)

    def run_repeatedly(**kwargs: Any) -> None:
        __tracebackhide__ = True
        runs = 0
        start = seeding.capture()
        drawn: list[str] = []

        with reported_once(item) as subtests:

            def counted() -> object:
                nonlocal runs, drawn
                runs += 1
                subtests.repeating = runs > 1
                result = original(**kwargs)
                if runs == 1:
                    drawn = seeding.drawn_since(start)
                return result

            try:
                found = examine(counted, check, accelerators, root)
            except BaseException as raised:
                if runs > 1:  # the report says which run raised (see raised_in_run)
                    moved = drawn or seeding.drawn_since(start)
                    error = type(raised).__name__
                    item.stash[RAISED_IN_RUN] = RaisedInRun(runs, check.iterations, moved, error)
                raise
        if found.torch_own is not None:
            reach.not_acted(item, check_name(item), found.torch_own)
        if found.message is not None:
            item.user_properties.append((LEAK_PROPERTY, found.message))
            pytest.fail(found.message, pytrace=False)

    if is_unittest(item):  # unittest reads the method's flags (expectedFailure) from it
        return functools.wraps(original)(run_repeatedly)
    return run_repeatedly
