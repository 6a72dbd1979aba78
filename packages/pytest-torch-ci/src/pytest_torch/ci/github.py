"""GitHub Actions reporting: an error annotation per failed test and per collection
error at the end of the run and a Markdown job summary in ``$GITHUB_STEP_SUMMARY`` (the
commands and the Markdown are built by :mod:`.annotations`). Registered by the plugin
on the controller only.

The summary's counts are pytest's own: tests by ``pytest_report_teststatus``,
collection errors and skipped modules, deselected tests and warnings, as its terminal
counts them. Under xdist every worker collects every module, so a collection error can
come once per worker; pytest counts each, its annotation and row come once."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_torch.ci.annotations import (
    Failure,
    artifact_paths,
    collect_failure,
    commands,
    failure,
    fallback,
    longrepr_text,
    summary,
)
from pytest_torch.ci.notes import add_note, why
from pytest_torch.ci.report_tables import gather

#: the name the reporter is registered under
PLUGIN_NAME = "torch_ci_github"


class GitHubReporter:
    """Collects failed reports (the controller's, under xdist) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.failures: list[Failure] = []
        self.artifacts: list[str] = []
        self.notes: list[str] = []
        #: outcomes as pytest's own summary line counts them ("passed", "xfailed", ...)
        self.outcomes: Counter[str] = Counter()
        #: the index in ``failures`` of each collection error, by test id and text
        self.collect_errors: dict[tuple[str, str], int] = {}

    def pytest_deselected(self, items: list[Any]) -> None:
        self.outcomes["deselected"] += len(items)

    def pytest_warning_recorded(self) -> None:
        self.outcomes["warnings"] += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if getattr(report, "count_towards_summary", True):
            if report.failed:
                self.outcomes["error"] += 1
            elif report.skipped:
                self.outcomes["skipped"] += 1
        if not report.failed:
            return
        try:
            key = (report.nodeid, longrepr_text(report))
        except Exception:  # a plugin's representation that cannot be printed: its own row
            key = (report.nodeid, f"report {id(report)}")
        if key in self.collect_errors:  # the same error, from another xdist worker
            index = self.collect_errors[key]
            self.failures[index] = self.failures[index]._replace(
                reported=self.failures[index].reported + 1
            )
            return
        self.collect_errors[key] = len(self.failures)
        self._add(report, collect_failure)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        if status and status[0] and getattr(report, "count_towards_summary", True):
            self.outcomes[status[0]] += 1
        if report.failed and not hasattr(report, "wasxfail"):
            self._add(report, failure)
            self.artifacts += artifact_paths(report)

    def _add(self, report: Any, build: Callable[[Any, Path, Path], Failure]) -> None:
        try:
            found = build(report, self.config.rootpath, self.config.invocation_params.dir)
        except Exception as problem:
            reason = why(problem)
            found = fallback(report, reason)
            add_note(report, [f"GitHub annotation: built from the test's location ({reason})"])
        self.failures.append(found)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
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
        tables, notes = gather(self.config)
        self.notes += notes
        try:
            text = summary(self.failures, self.outcomes, tables, self.artifacts, notes)
            with open(path, "a", encoding="utf-8") as out:
                out.write(text + "\n")
        except Exception as problem:
            self.notes.append(
                f"the job summary was not written to $GITHUB_STEP_SUMMARY ({path}):"
                f" {why(problem)}. The annotations above still name every failure."
            )
