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
(:mod:`.html_report`). The options' values live in :mod:`.settings`.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_torch.ci.settings import CiSettings, settings_key
from pytest_torch.core.ondemand import register_once
from pytest_torch.core.options import add_option_with_ini, option_or_ini, option_source
from pytest_torch.core.session import xdist_worker

if TYPE_CHECKING:
    from pytest_torch.core.compare import TensorMismatchError

pytest_plugins = ["torch_core"]

#: mismatches announced in the running test phase, not yet known to be failures
pending_key = pytest.StashKey[list["TensorMismatchError"]]()


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

    group.addoption(
        "--torch-github-annotations",
        dest="torch_github_annotations",
        nargs="?",
        const="on",
        default=None,
        metavar="on|off|auto",
        help="GitHub Actions error annotations for failed tests and a job summary; auto"
        " (the default) turns them on when GITHUB_ACTIONS=true. (ini: torch_github_annotations)",
    )
    parser.addini(
        "torch_github_annotations",
        "GitHub annotations: on, off or auto (command line: --torch-github-annotations)",
        default="auto",
    )


_SWITCH = {"on": True, "true": True, "yes": True, "1": True}
_SWITCH.update({"off": False, "false": False, "no": False, "0": False})


def _annotations_enabled(config: pytest.Config) -> bool:
    value = str(option_or_ini(config, "torch_github_annotations")).strip().lower()
    if value == "auto":
        return os.environ.get("GITHUB_ACTIONS") == "true"
    if value not in _SWITCH:
        source = option_source(config, "torch_github_annotations", "--torch-github-annotations")
        raise pytest.UsageError(f"{source}: expected on, off or auto, got {value!r}")
    return _SWITCH[value]


def pytest_configure(config: pytest.Config) -> None:
    value = option_or_ini(config, "torch_failure_artifacts")
    root = config.invocation_params.dir
    directory = None
    if value:
        directory = Path(str(value))
        directory = directory if directory.is_absolute() else root / directory
    html = None
    if config.pluginmanager.hasplugin("html"):  # pytest-html: its report gets the pictures
        from pytest_torch.ci import html_report

        html = html_report.report_path(config)
    if directory is None and html is not None:  # the pictures go beside the report
        directory = html.parent / f"{html.stem}-torch-failure-artifacts"
    if directory is not None:
        from pytest_torch.core.paths import unwritable

        problem = unwritable(directory, folder=True)
        if problem is not None:
            flag = "--torch-failure-artifacts"
            source = option_source(config, "torch_failure_artifacts", flag) if value else flag
            raise pytest.UsageError(
                f"{source}: cannot save failure artifacts in {directory}: {problem}."
                " Choose a writable folder."
            )
    config.stash[settings_key] = CiSettings(directory, root)
    if html is not None:
        from pytest_torch.ci import html_report

        register_once(config, html_report.PLUGIN_NAME, lambda: html_report.HtmlReport(config))
    if _annotations_enabled(config) and xdist_worker(config) is None:
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
        from pytest_torch.ci.failures import on_collect_error

        on_collect_error(node.path, call.excinfo.value, report)
