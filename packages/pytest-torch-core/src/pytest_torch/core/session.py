"""Where plain functions (``assert_close``) find the running pytest session.

Public assertions are plain functions without a ``request``; to tell sibling plugins
about what happened they need the active config and the test being run. The core
plugin pushes both here; nested in-process sessions (pytester) stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_torch.core.compare import TensorMismatchError

_configs: list[pytest.Config] = []
current_item_key = pytest.StashKey["pytest.Item | None"]()


def push(config: pytest.Config) -> None:
    _configs.append(config)


def pop(config: pytest.Config) -> None:
    if config in _configs:
        _configs.remove(config)


def active_config() -> pytest.Config | None:
    """The innermost running pytest config that has the core plugin, or None."""
    return _configs[-1] if _configs else None


def current_item() -> pytest.Item | None:
    """The test being run in the active session, or None between tests."""
    config = active_config()
    return None if config is None else config.stash.get(current_item_key, None)


def announce_mismatch(error: TensorMismatchError) -> None:
    """Call ``pytest_torch_tensor_mismatch`` in the active session, if any."""
    config = active_config()
    if config is None:
        return
    config.hook.pytest_torch_tensor_mismatch(config=config, item=current_item(), error=error)


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's pytest-xdist worker id (``"gw0"``), or None in the controller or
    without xdist: the one test the family's plugins use for "am I a worker"."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput.get("workerid", "gw?"))
