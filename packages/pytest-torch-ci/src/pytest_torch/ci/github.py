"""GitHub Actions reporting: an error annotation per failed test at the end of the run
and a Markdown job summary in ``$GITHUB_STEP_SUMMARY`` (the commands and the Markdown
are built by :mod:`.annotations`). Registered by the plugin on the controller only."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

from pytest_torch.ci.annotations import (
    Failure,
    artifact_paths,
    commands,
    failure,
    fallback,
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

    def pytest_deselected(self, items: list[Any]) -> None:
        self.outcomes["deselected"] += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        if status and status[0]:
            self.outcomes[status[0]] += 1
        if report.failed and not hasattr(report, "wasxfail"):
            try:
                found = failure(report, self.config.rootpath, self.config.invocation_params.dir)
            except Exception as problem:
                reason = why(problem)
                found = fallback(report, reason)
                add_note(report, [f"GitHub annotation: built from the test's location ({reason})"])
            self.failures.append(found)
            self.artifacts += artifact_paths(report)

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
