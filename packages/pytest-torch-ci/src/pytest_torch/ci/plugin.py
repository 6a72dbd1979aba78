"""pytest wiring of the CI plugin (entry point ``torch_ci``).

``--torch-failure-artifacts=DIR``: the tensor mismatch of a failing test — from the
family's ``assert_close`` (through core's mismatch hook, kept pending until the report
says the test failed) or from ``torch.testing.assert_close`` — is saved as a heatmap
PNG and a ``.pt`` file of both tensors, and the paths are noted under the failure.

Whatever goes wrong here becomes a one-line note in the failed test's report (section
``pytest-torch-ci``): the user's exception and message are never replaced or chained.

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


settings_key = pytest.StashKey[CiSettings]()
#: mismatches announced in the running test phase, not yet known to be failures
pending_key = pytest.StashKey[list["TensorMismatchError"]]()

#: what the report of a failed phase carries (plain values: they travel through xdist)
LINE_ATTRIBUTE = "torch_ci_failing_line"
ARTIFACTS_ATTRIBUTE = "torch_ci_artifacts"
NOTES_ATTRIBUTE = "torch_ci_notes"
NOTES_TITLE = "pytest-torch-ci"
ARTIFACTS_PREFIX = "failure artifacts (heatmaps, tensors)"


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
    if _annotations_enabled(config) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_GitHubReporter(config), "torch_ci_github")


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
        try:
            notes = _on_failure(item, call, report, announced)
        except Exception as problem:  # the user's failure is reported whatever happens here
            notes = [f"pytest-torch-ci: could not process this failure ({_why(problem)})"]
        if notes:
            add_note(report, notes)
    return report


def _on_failure(
    item: pytest.Item,
    call: pytest.CallInfo[None],
    report: pytest.TestReport,
    announced: list[Any],
) -> list[str]:
    """Record the failing line and save the failure artifacts; notes for the report."""
    error = call.excinfo.value if call.excinfo is not None else None
    notes = []
    if error is not None:
        try:
            from pytest_torch.ci.annotations import failing_line

            line = failing_line(error, item.config.rootpath / report.location[0])
            if line is not None:
                report.__dict__[LINE_ATTRIBUTE] = line
        except Exception as problem:
            notes.append(f"GitHub annotation: the failing line was not found ({_why(problem)})")
    settings = item.config.stash[settings_key]
    if settings.artifacts is None:
        return notes
    try:
        from pytest_torch.ci import artifacts

        pairs, caught_earlier = artifacts.of_failure(error, announced)
        if not pairs:
            return notes
        written = artifacts.write(settings.artifacts, item.nodeid, pairs)
    except Exception as problem:
        notes.append(
            f"failure artifacts: nothing saved in {settings.artifacts} ({_why(problem)})."
            " Check that the folder is writable and has space."
        )
        return notes
    shown = artifacts.shown(written.paths, settings.root)
    report.__dict__[ARTIFACTS_ATTRIBUTE] = shown
    if shown:
        what = " of mismatches caught earlier in the test" if caught_earlier else ""
        notes.append(f"{ARTIFACTS_PREFIX}{what}: {', '.join(shown)}")
    notes += [f"failure artifacts: {note}" for note in written.notes]
    pictures = [p for p in written.paths if p.suffix == ".png"]
    if pictures and item.config.pluginmanager.has_plugin("torch_ci_html"):
        try:
            _embed_pictures(report, pictures)
        except Exception as problem:
            notes.append(f"HTML report: heatmaps not embedded ({_why(problem)})")
    return notes


def _why(problem: BaseException) -> str:
    from pytest_torch.ci.artifacts import reason

    return reason(problem)


def add_note(report: pytest.TestReport, notes: list[str]) -> None:
    """Notes under the failure in the report (and in its text, junit XML, xdist)."""
    text = "\n".join(notes)
    longrepr = report.longrepr
    try:
        longrepr.addsection(NOTES_TITLE, text)  # type: ignore[union-attr]
    except Exception:  # a string or a plugin's own representation
        report.sections.append((NOTES_TITLE, text))
    report.__dict__.setdefault(NOTES_ATTRIBUTE, []).extend(notes)


def _embed_pictures(report: pytest.TestReport, pictures: list[Path]) -> None:
    import base64

    from pytest_html import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        extras as html_extras,
    )

    added = list(getattr(report, "extras", []))
    for picture in pictures:
        encoded = base64.b64encode(picture.read_bytes()).decode("ascii")
        added.append(html_extras.png(encoded, picture.stem))
    report.extras = added  # type: ignore[attr-defined]


class _GitHubReporter:
    """Collects failed reports (the controller's, under xdist) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.failures: list[Any] = []
        self.artifacts: list[str] = []
        self.notes: list[str] = []
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from pytest_torch.ci import annotations

        if report.failed and not hasattr(report, "wasxfail"):
            try:
                found = annotations.failure(
                    report, self.config.rootpath, self.config.invocation_params.dir
                )
            except Exception as problem:
                why = _why(problem)
                found = annotations.fallback(report, why)
                add_note(report, [f"GitHub annotation: built from the test's location ({why})"])
            self.failures.append(found)
            self.artifacts += annotations.artifact_paths(report)
        elif report.passed and report.when == "call":
            self.passed += 1

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_torch.ci.annotations import commands

        for command in commands(self.failures):
            terminalreporter.ensure_newline()  # GitHub reads commands at line starts only
            terminalreporter.write_line(command)
        for note in self.notes:
            terminalreporter.write_line(f"pytest-torch-ci: {note}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # runs before the terminal summary, which prints self.notes
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if not path:
            return
        from pytest_torch.ci.annotations import summary

        tables, notes = _tables(self.config)
        self.notes += notes
        try:
            text = summary(self.failures, self.passed, tables, self.artifacts, notes)
            with open(path, "a", encoding="utf-8") as out:
                out.write(text + "\n")
        except Exception as problem:
            self.notes.append(
                f"the job summary was not written to $GITHUB_STEP_SUMMARY ({path}):"
                f" {_why(problem)}. The annotations above still name every failure."
            )


def _tables(config: pytest.Config) -> tuple[dict[str, list[str]], list[str]]:
    """The end-of-run tables the sibling plugins offer (``pytest_torch_report_tables``);
    a note per one that could not be built."""
    tables: dict[str, list[str]] = {}
    notes: list[str] = []
    try:
        offered = config.hook.pytest_torch_report_tables(config=config)
    except Exception as problem:
        return tables, [f"the plugins' tables could not be gathered ({_why(problem)})"]
    for table in (table for answer in offered if answer for table in answer):
        try:
            lines = table.render()
        except Exception as problem:
            notes.append(f"the {table.title.lower()} table could not be built ({_why(problem)})")
            continue
        if lines:
            tables[table.title] = lines
    return tables, notes


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

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: pytest.Session
    ) -> None:
        import html

        tables, notes = _tables(self.config)
        for title, table in tables.items():
            text = html.escape("\n".join(table))
            prefix.append(f"<h2>pytest-torch: {html.escape(title)}</h2><pre>{text}</pre>")
        for note in notes:
            prefix.append(f"<p>pytest-torch-ci: {html.escape(note)}</p>")
