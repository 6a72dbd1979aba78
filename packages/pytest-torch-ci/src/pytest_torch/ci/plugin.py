"""pytest wiring of the CI plugin (entry point ``torch_ci``).

``--torch-failure-artifacts=DIR``: every tensor mismatch of a failing test — from the
family's ``assert_close`` (through core's mismatch hook) or from
``torch.testing.assert_close`` — is saved as a heatmap PNG and a ``.pt`` file of both
tensors, and the paths are appended to the test's error message.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.options import add_option_with_ini, option_or_ini

if TYPE_CHECKING:
    from pytest_torch.core.compare import TensorMismatchError

pytest_plugins = ["torch_core"]


class CiSettings:
    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, artifacts: Path | None, root: Path) -> None:
        self.artifacts = artifacts
        self.root = root


settings_key = pytest.StashKey[CiSettings]()
handled_key = pytest.StashKey[set[int]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-ci", "torch-ci: failures readable in CI")
    add_option_with_ini(
        parser,
        group,
        "--torch-failure-artifacts",
        ini="torch_failure_artifacts",
        default=None,
        metavar="DIR",
        help="Save a heatmap PNG and the tensors (.pt) of every tensor mismatch of a"
        " failing test under DIR/<test id>/, and name them in the error.",
    )


def pytest_configure(config: pytest.Config) -> None:
    value = option_or_ini(config, "torch_failure_artifacts")
    root = config.invocation_params.dir
    directory = None
    if value:
        directory = Path(str(value))
        directory = directory if directory.is_absolute() else root / directory
    config.stash[settings_key] = CiSettings(directory, root)


def _save(item: pytest.Item, pairs: list[Any]) -> str | None:
    settings = item.config.stash[settings_key]
    if settings.artifacts is None or not pairs:
        return None
    from pytest_torch.ci import artifacts

    paths = artifacts.write(settings.artifacts, item.nodeid, pairs)
    return artifacts.describe(paths, settings.root)


def pytest_torch_tensor_mismatch(
    config: pytest.Config, item: pytest.Item | None, error: TensorMismatchError
) -> None:
    if item is None or config.stash[settings_key].artifacts is None:
        return
    from pytest_torch.ci.artifacts import Pair

    pairs = [
        Pair(m.path, m.actual, m.expected, m.rtol, m.atol)
        for m in error.mismatches
        if m.actual is not None and m.expected is not None
    ]
    text = _save(item, pairs)
    if text is not None:
        error.add_detail(text)
        item.stash.setdefault(handled_key, set()).add(id(error))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    except AssertionError as error:
        if item.config.stash[settings_key].artifacts is not None and id(
            error
        ) not in item.stash.get(handled_key, set()):
            from pytest_torch.ci.artifacts import from_torch_testing

            text = _save(item, from_torch_testing(error))
            if text is not None and error.args and isinstance(error.args[0], str):
                error.args = (f"{error.args[0]}\n{text}", *error.args[1:])
        raise
