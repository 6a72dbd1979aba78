"""How a plugin built on core makes sure core is loaded.

``pytest_plugins = ["torch_core"]`` finds core by its entry-point name only on recent
pytest releases; on older ones, with plugin autoload off (or when the sibling happens
to load first), it fails with "No module named 'torch_core'". A sibling plugin
therefore also calls :func:`require_core` from its ``pytest_addhooks``, which runs as
soon as the sibling is registered::

    from pytest_torch.core.loading import require_core

    pytest_plugins = ["torch_core"]

    def pytest_addhooks(pluginmanager):
        require_core(pluginmanager, "torch_perf")
"""

from __future__ import annotations

import sys

import pytest

CORE = "torch_core"
CORE_MODULE = "pytest_torch.core.plugin"


def require_core(pluginmanager: pytest.PytestPluginManager, requester: str) -> None:
    """Load the core plugin for ``requester`` (an entry-point name), or explain why not."""
    if pluginmanager.has_plugin(CORE):
        return
    module = sys.modules.get(CORE_MODULE)
    if module is not None and pluginmanager.is_registered(module):
        return  # loaded under its module path (-p pytest_torch.core.plugin)
    if pluginmanager.is_blocked(CORE):
        raise pytest.UsageError(
            f"the {requester} plugin needs {CORE}, which is blocked with -p no:{CORE}."
            f" Remove -p no:{CORE}, or block {requester} as well with -p no:{requester}."
        )
    pluginmanager.import_plugin(CORE, consider_entry_points=True)
    if not pluginmanager.has_plugin(CORE):
        raise pytest.UsageError(
            f"the {requester} plugin needs {CORE}, which is not installed:"
            f" pip install pytest-torch-core"
        )
