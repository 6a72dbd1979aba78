"""The leak check's runner: the test function replaced by one that runs the body once
to warm up and then the check's iterations, with the same fixture values.

The engine is :func:`pytest_torch.memory.leaks.check_for_leaks`; this module decides
whether a test gets the check and wraps its body for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.memory.asked import leak_check_of, runs_once
from pytest_torch.memory.markers import LEAK
from pytest_torch.memory.measured_devices import devices_to_measure
from pytest_torch.memory.results import LEAK_PROPERTY

if TYPE_CHECKING:
    from pytest_torch.memory.leak_parameters import LeakCheck
    from pytest_torch.memory.settings import MemorySettings


#: (the run that raised, the check's iterations) when a run after the first raised
RAISED_IN_RUN = pytest.StashKey[tuple[int, int]]()


def raised_in_run(item: pytest.Item) -> str | None:
    """The report's section for a test whose body raised in a run after the first under
    the leak check (None otherwise): the user's error is not the check's, but it would
    not have happened in a plain run."""
    found = item.stash.get(RAISED_IN_RUN, None)
    if found is None:
        return None
    run, iterations = found
    marked = LEAK.mark_on(item) is not None
    how = (
        f"@pytest.mark.{LEAK.name} runs this test's body"
        if marked
        else "--torch-leak-check runs every test's body"
    )
    lines = [
        f"{how} up to {iterations + 1} times to watch its memory (once to warm up, then"
        f" until a run leaves no more behind than the one before, at most {iterations}),"
        f" and one more, traced, when it leaks. Run {run} raised the error"
        f" above; the {'first run' if run == 2 else f'first {run - 1} runs'} passed. A run"
        " without the check runs it once.",
        "Every run gets the same fixture values and starts from the same random state as"
        " the first, so what differs is state the body changes and keeps: a global or"
        " module attribute, a cache, a counter, a file, a generator of its own"
        " (torch.Generator, numpy.random.default_rng) made outside the body.",
    ]
    if "torch_seed" not in getattr(item, "fixturenames", ()):
        lines.append(
            "This test does not use torch_seed: its random draws come from whatever state"
            " earlier tests left, so in another order a plain run may fail the same way."
            " Request torch_seed to draw the same values in every run and order."
        )
    if not marked:
        lines.append(f"Run it as before with: pytest {item.nodeid} (without --torch-leak-check)")
    return "\n".join(lines)


def leak_check_to_run(pyfuncitem: pytest.Function, settings: MemorySettings) -> LeakCheck | None:
    """The leak check this test's body gets, or None: not asked for, a body that must
    run once (e.g. perf times it; only reached by ``--torch-leak-check``, a marker on
    such a test is a collection error), or an async body (run by its own plugin)."""
    check = leak_check_of(pyfuncitem, settings)
    if check is None:
        return None
    if runs_once(pyfuncitem.config, pyfuncitem.nodeid, pyfuncitem.fixturenames) is not None:
        return None
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    return check


def repeating_body(pyfuncitem: pytest.Function, check: LeakCheck) -> Callable[..., None]:
    """The test function, run repeatedly and failing the test with the leak report
    (also kept in its ``user_properties``) when every run left more behind."""
    original = pyfuncitem.obj
    accelerators = [d for d in devices_to_measure(pyfuncitem, None) if d.type != "cpu"]
    root = str(pyfuncitem.config.rootpath)

    def run_repeatedly(**kwargs: Any) -> None:
        __tracebackhide__ = True
        from pytest_torch.memory.leaks import check_for_leaks

        runs = 0

        def counted() -> object:
            nonlocal runs
            runs += 1
            return original(**kwargs)

        try:
            message = check_for_leaks(counted, check, accelerators, root)
        except BaseException:
            if runs > 1:  # the report says which run raised (see raised_in_run)
                pyfuncitem.stash[RAISED_IN_RUN] = (runs, check.iterations)
            raise
        if message is not None:
            pyfuncitem.user_properties.append((LEAK_PROPERTY, message))
            pytest.fail(message, pytrace=False)

    return run_repeatedly
