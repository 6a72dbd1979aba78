"""pytest wiring of the CI plugin (entry point ``torch_ci``).

``--torch-failure-artifacts=DIR``: the tensor mismatch of a failing test — from the
family's ``assert_close`` (through core's mismatch hook, kept pending until the report
says the test failed) or from ``torch.testing.assert_close`` — is saved as a heatmap
PNG and a ``.pt`` file of both tensors, and the paths are noted under the failure
(:mod:`.failures`, :mod:`.artifacts`, :mod:`.heatmaps`).

Whatever goes wrong here becomes a one-line note in the failed test's report (section
``pytest-torch-ci``, :mod:`.notes`): the user's exception and message are never
replaced or chained.

``--torch-github-annotations`` (on by itself under GitHub Actions): an error annotation
per failed test and per collection error at the end of the run, and a Markdown job
summary when ``$GITHUB_STEP_SUMMARY`` is set (:mod:`.github`). Only the controller
reports under xdist; the line of a collection error is read where it happens
(:mod:`.failures`). With pytest-html, the report gets the heatmaps and the family's tables
(:mod:`.html_report`). The options are declared and read in :mod:`.options`, their
values live in :mod:`.settings`.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

from pytest_torch.ci.options import add_options, read_settings
from pytest_torch.ci.settings import settings_key
from pytest_torch.core.loading import require_core
from pytest_torch.core.ondemand import register_once
from pytest_torch.core.session import xdist_worker

if TYPE_CHECKING:
    from pytest_torch.core.compare import TensorMismatchError

pytest_plugins = ["torch_core"]

#: mismatches announced in the running test phase, not yet known to be failures
pending_key = pytest.StashKey[list["TensorMismatchError"]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    require_core(pluginmanager, "torch_ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash[settings_key] = read_settings(config)
    # the reporters (their tables, artifacts and annotation patterns: about 10 ms to
    # import) are imported only by runs that use them
    if settings.html_report is not None:
        from pytest_torch.ci import html_report

        register_once(config, html_report.PLUGIN_NAME, lambda: html_report.HtmlReport(config))
    if settings.annotations and xdist_worker(config) is None:
        from pytest_torch.ci import github

        register_once(config, github.PLUGIN_NAME, lambda: github.GitHubReporter(config))


def pytest_torch_tensor_mismatch(
    config: pytest.Config, item: pytest.Item | None, error: TensorMismatchError
) -> None:
    # kept until the phase's report says whether the test failed (it may catch it)
    if item is not None and config.stash[settings_key].artifacts is not None:
        item.stash.setdefault(pending_key, []).append(error)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # tryfirst: the outermost wrapper, so the report is final (xfail already applied)
    report = yield
    announced = item.stash.get(pending_key, [])
    item.stash[pending_key] = []
    if report.failed:
        # start-up: failures' annotation patterns and artifacts cost ms, paid on failure
        from pytest_torch.ci.failures import on_failure

        settings = item.config.stash[settings_key]
        on_failure(item, call, report, announced, settings.artifacts, settings.root)
    return report


def pytest_exception_interact(
    node: pytest.Item | pytest.Collector,
    call: pytest.CallInfo[object],
    report: pytest.TestReport | pytest.CollectReport,
) -> None:
    # pytest hands over a collection error's exception here only (its report has none)
    if isinstance(report, pytest.CollectReport) and report.failed and call.excinfo is not None:
        from pytest_torch.ci.failures import on_collect_error  # start-up: see on_failure

        on_collect_error(node.path, call.excinfo.value, report)
