"""Hooks registered only when a test or an option needs them.

A per-test hook that costs something (a wrapper around every test call) is not part of
a plugin module; a package puts such hooks as methods of one small class, named as the
hooks they implement, and registers one instance the first time it is needed::

    class _LeakRunner:
        @pytest.hookimpl(wrapper=True)
        def pytest_pyfunc_call(self, pyfuncitem): ...

    register_once(config, "torch_memory_runner", _LeakRunner)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest


def register_once(config: pytest.Config, name: str, factory: Callable[[], object]) -> None:
    """Register ``factory()`` as plugin ``name`` unless one is registered already."""
    if not config.pluginmanager.has_plugin(name):
        config.pluginmanager.register(factory(), name)
