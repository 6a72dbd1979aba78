"""pytest wiring of the determinism plugin (entry point ``torch_determinism``).

``--torch-deterministic`` turns deterministic mode on for each test that uses the
``torch_seed`` fixture, through core's ``pytest_torch_seeded`` hook, and turns it back
off at the test's teardown (:mod:`.applied`). When such a test fails because an op has
no deterministic implementation, its report gets a section saying that the flag (not
the user) turned deterministic mode on, which op refused, and how to run the test
without it (:mod:`.explanations`).

cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` before the first CUDA matrix product of the
process (see ``cublas``): the plugin sets it when the initial conftests are about to be
imported, before any of them can touch CUDA, or at configure time for a plugin
registered later (a conftest's ``pytest_plugins``), and removes it when pytest is done
(:mod:`.workspace`). The checks themselves are plain functions (``assertion``,
``diagnosis``); the options are declared and read in ``options``, their values live in
``settings``, what the session did in ``state``.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_torch.core.loading import require_core
from pytest_torch.core.reports import add_section
from pytest_torch.determinism import applied, explanations, workspace
from pytest_torch.determinism.options import add_options, read_settings
from pytest_torch.determinism.settings import settings_key
from pytest_torch.determinism.state import DeterminismSession, session_key

pytest_plugins = ["torch_core"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_determinism")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Plugins from entry points and -p are registered by now; the command line is
    # parsed only into known_args_namespace, and the ini file is read.
    _set_up(early_config, early=True)


def pytest_configure(config: pytest.Config) -> None:
    if settings_key not in config.stash:  # registered after start-up: set up now
        _set_up(config, early=False)


def _set_up(config: pytest.Config, early: bool) -> None:
    settings = config.stash[settings_key] = read_settings(config, early=early)
    state = config.stash[session_key] = DeterminismSession()
    if not settings.enabled:
        return
    config.pluginmanager.register(applied.AppliedCounter(state), "torch_determinism_applied")
    workspace.set_up(state, lambda text: _warn(config, text))
    if state.cublas_set:
        config.add_cleanup(lambda: workspace.restore(state))


def _warn(config: pytest.Config, message: str) -> None:
    config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=3)


def pytest_torch_seeded(item: pytest.Item, seed: int) -> None:
    settings = item.config.stash[settings_key]
    if settings.enabled:
        applied.apply(item, settings)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    applied.mark_report(item, report)
    if report.failed and call.excinfo is not None and applied.applied_to(item):
        text = explanations.of_failure(item, call.excinfo.value, report.longreprtext)
        if text is not None:
            add_section(report, "torch-deterministic", text)
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    return applied.header_lines(config.stash[settings_key], config.stash[session_key])
