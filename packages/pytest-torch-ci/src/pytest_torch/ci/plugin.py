"""pytest wiring of the CI plugin (entry point ``torch_ci``).

``--torch-failure-artifacts=DIR``: every tensor mismatch of a failing test — from the
family's ``assert_close`` (through core's mismatch hook) or from
``torch.testing.assert_close`` — is saved as a heatmap PNG and a ``.pt`` file of both
tensors, and the paths are appended to the test's error message.

``--torch-github-annotations`` (on by itself under GitHub Actions): an error annotation
per failed test at the end of the run, and a Markdown job summary when
``$GITHUB_STEP_SUMMARY`` is set. Only the controller reports under xdist.
"""

from __future__ import annotations

import os
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


pictures_key = pytest.StashKey[list[Path]]()


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
        raise pytest.UsageError(
            f"--torch-github-annotations (ini torch_github_annotations): expected on, off or"
            f" auto, got {value!r}"
        )
    return _SWITCH[value]


def pytest_configure(config: pytest.Config) -> None:
    value = option_or_ini(config, "torch_failure_artifacts")
    root = config.invocation_params.dir
    directory = None
    if value:
        directory = Path(str(value))
        directory = directory if directory.is_absolute() else root / directory
    html = _html_report(config)
    if directory is None and html is not None:  # the pictures go beside the report
        directory = html.parent / f"{html.stem}-torch-failure-artifacts"
    if directory is not None:
        from pytest_torch.core.paths import unwritable

        problem = unwritable(directory, folder=True)
        if problem is not None:
            raise pytest.UsageError(
                f"--torch-failure-artifacts (ini torch_failure_artifacts): cannot save failure"
                f" artifacts in {directory}: {problem}. Choose a writable folder."
            )
    config.stash[settings_key] = CiSettings(directory, root)
    if html is not None:
        config.pluginmanager.register(_HtmlReport(config), "torch_ci_html")
    if directory is not None:
        config.pluginmanager.register(_ArtifactsForTorchTesting(), "torch_ci_artifacts")
    if _annotations_enabled(config) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_GitHubReporter(config), "torch_ci_github")


def _save(item: pytest.Item, pairs: list[Any]) -> str | None:
    settings = item.config.stash[settings_key]
    if settings.artifacts is None or not pairs:
        return None
    from pytest_torch.ci import artifacts

    try:
        paths = artifacts.write(settings.artifacts, item.nodeid, pairs)
    except OSError as exc:  # the folder went away or filled up during the run
        where = exc.filename or settings.artifacts
        return f"failure artifacts could not be saved ({where}: {exc.strerror or exc})"
    item.stash.setdefault(pictures_key, []).extend(p for p in paths if p.suffix == ".png")
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


class _ArtifactsForTorchTesting:
    """Registered with --torch-failure-artifacts only: reads torch.testing's tensors."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        return (yield from _runtest_call(item))


def _runtest_call(item: pytest.Item) -> Generator[None, None, None]:
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


class _GitHubReporter:
    """Collects failed reports (the controller's, under xdist) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.failures: list[Any] = []
        self.texts: list[str] = []
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from pytest_torch.ci.annotations import failure

        if report.failed and not hasattr(report, "wasxfail"):
            self.failures.append(
                failure(report, self.config.rootpath, self.config.invocation_params.dir)
            )
            self.texts.append(report.longreprtext)
        elif report.passed and report.when == "call":
            self.passed += 1

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_torch.ci.annotations import commands

        for command in commands(self.failures):
            terminalreporter.ensure_newline()  # GitHub reads commands at line starts only
            terminalreporter.write_line(command)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if not path:
            return
        from pytest_torch.ci.annotations import artifact_paths, summary

        text = summary(self.failures, self.passed, _tables(self.config), artifact_paths(self.texts))
        with open(path, "a", encoding="utf-8") as out:
            out.write(text + "\n")


def _tables(config: pytest.Config) -> dict[str, list[str]]:
    """The end-of-run tables of the sibling plugins that ran."""
    tables: dict[str, list[str]] = {}
    if config.pluginmanager.hasplugin("torch_perf"):
        from pytest_torch.perf.plugin import settings_key as perf_key
        from pytest_torch.perf.records import render_table

        perf = config.stash.get(perf_key, None)
        if perf is not None and perf.records:
            tables["Performance"] = render_table(perf.records)
        if perf is not None and perf.benchmark_results:
            from pytest_torch.perf.suite_report import render

            tables["Benchmarks"] = render(perf.benchmark_results, perf.machine())
    if config.pluginmanager.hasplugin("torch_memory"):
        from pytest_torch.memory.plugin import settings_key as memory_key
        from pytest_torch.memory.report import render_table as memory_table

        memory = config.stash.get(memory_key, None)
        if memory is not None and memory.records:
            tables["Peak memory"] = memory_table(memory.records, memory.top or 10)
    return tables


def _html_report(config: pytest.Config) -> Path | None:
    """The pytest-html report this run writes, if any."""
    if not config.pluginmanager.hasplugin("html"):
        return None
    path = config.getoption("htmlpath", default=None)
    if not path:
        return None
    report = Path(str(path)).expanduser()
    return report if report.is_absolute() else config.invocation_params.dir / report


class _HtmlReport:
    """With pytest-html: heatmaps embedded in failing tests, the family's tables on top."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        pictures = item.stash.get(pictures_key, [])
        if report.failed and pictures:
            import base64

            from pytest_html import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
                extras as html_extras,
            )

            added = list(getattr(report, "extras", []))
            for picture in pictures:
                encoded = base64.b64encode(picture.read_bytes()).decode("ascii")
                added.append(html_extras.png(encoded, picture.stem))
            report.extras = added  # type: ignore[attr-defined]
            item.stash[pictures_key] = []
        return report

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        import html

        for title, table in _tables(self.config).items():
            text = html.escape("\n".join(table))
            prefix.append(f"<h2>pytest-torch: {html.escape(title)}</h2><pre>{text}</pre>")
