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

from pytest_torch.memory.markers import leak_check_of, runs_once
from pytest_torch.memory.measured_devices import devices_to_measure
from pytest_torch.memory.results import LEAK_PROPERTY

if TYPE_CHECKING:
    from pytest_torch.memory.leak_settings import LeakCheck
    from pytest_torch.memory.settings import MemorySettings


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

        message = check_for_leaks(lambda: original(**kwargs), check, accelerators, root)
        if message is not None:
            pyfuncitem.user_properties.append((LEAK_PROPERTY, message))
            pytest.fail(message, pytrace=False)

    return run_repeatedly
