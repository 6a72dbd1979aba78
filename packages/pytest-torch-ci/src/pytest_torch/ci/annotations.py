"""GitHub Actions workflow commands and job summary for failed tests.

One ``::error file=…,line=…,title=…::message`` per failed test phase, pointing at the
failing line inside the test, escaped the way GitHub requires; at most
:data:`MAX_ANNOTATIONS` of them, the last one saying how many more failed (GitHub
shows ten error annotations per step). The job summary is Markdown for
``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

MAX_ANNOTATIONS = 10
#: lines of a failure message put into its annotation
MESSAGE_LINES = 12
#: set on failed reports by :mod:`.failures`, read here
LINE_ATTRIBUTE = "torch_ci_failing_line"
ARTIFACTS_ATTRIBUTE = "torch_ci_artifacts"


class Failure(NamedTuple):
    test: str
    phase: str  # setup, call or teardown
    file: str
    line: int
    title: str
    message: str


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


_KINDS: tuple[tuple[str, str], ...] = (
    (r"latency budget exceeded: .*\((\+[\d.]+ %)\)", "latency budget exceeded {0}"),
    (r"latency \(median\): .*\((\+[\d.]+ %)\)", "latency regression {0}"),
    (r"peak memory on (\S+): .*\((\+[\d.]+ %)", "peak-memory regression on {0} {1}"),
    (
        r"peak memory on (\S+) was .* over the torch_max_memory budget",
        "memory budget exceeded on {0}",
    ),
    (r"^memory leak: ", "memory leak"),
    (r"not deterministic: ", "not deterministic"),
    (r"Tensors are not close|Tensor-likes are not close", "tensors not close"),
)


def kind_of(message: str) -> str | None:
    """A short name for well-known failures (perf, memory, determinism, tensors)."""
    for pattern, title in _KINDS:
        match = re.search(pattern, message, re.M)
        if match:
            return title.format(*match.groups())
    return None


def _message(report: Any) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else report.longreprtext
    # "pkg.module.SomeError: text" -> "SomeError: text"
    text = re.sub(r"^(?:[\w]+\.)+(\w+(?:Error|Exception|Failed)): ", r"\1: ", text)
    return text.removeprefix("Failed: ")


def failing_line(error: BaseException, test_file: Path) -> int | None:
    """The line of the deepest frame in ``test_file`` of the error's own traceback.

    Read from the exception, not from the printed report, so it is the same whatever
    ``--tb`` says (native, line and no print no file locations pytest can read).
    """
    target = os.path.normcase(os.path.realpath(test_file))
    same: dict[str, bool] = {}
    line = None
    entry = error.__traceback__
    while entry is not None:
        name = entry.tb_frame.f_code.co_filename
        if name not in same:
            same[name] = os.path.normcase(os.path.realpath(name)) == target
        if same[name]:
            line = entry.tb_lineno
        entry = entry.tb_next
    return line


def _failing_line(report: Any, test_file: Path, invocation: Path) -> int:
    recorded = getattr(report, LINE_ATTRIBUTE, None)
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", [])
    for entry in reversed(entries):
        location = getattr(entry, "reprfileloc", None)
        if location is None:
            continue
        path = Path(location.path)
        path = path if path.is_absolute() else invocation / path
        if path.resolve() == test_file.resolve():
            return int(location.lineno)
    return int(report.location[1] or 0) + 1


def failure(report: Any, rootdir: Path, invocation: Path) -> Failure:
    """The annotation of one failed report."""
    test_file = rootdir / report.location[0]
    workspace = Path(os.environ.get("GITHUB_WORKSPACE") or rootdir)
    try:
        shown = test_file.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        shown = report.location[0]
    message = _message(report)
    name = report.nodeid.split("::", 1)[-1]
    kind = kind_of(report.longreprtext) or kind_of(message)
    phase = "" if report.when == "call" else f" (error in {report.when})"
    title = f"{name}{phase}: {kind}" if kind else f"{name} failed{phase}"
    lines = message.splitlines()
    if len(lines) > MESSAGE_LINES:
        lines = [
            *lines[:MESSAGE_LINES],
            f"... ({len(lines) - MESSAGE_LINES} more lines in the log)",
        ]
    return Failure(
        report.nodeid, report.when, shown, _failing_line(report, test_file, invocation), title,
        "\n".join(lines),
    )  # fmt: skip


def commands(failures: Sequence[Failure]) -> list[str]:
    """The workflow commands: one per failure, capped, with a last one for the rest."""
    shown = list(failures)
    rest = 0
    if len(shown) > MAX_ANNOTATIONS:
        shown, rest = shown[: MAX_ANNOTATIONS - 1], len(shown) - (MAX_ANNOTATIONS - 1)
    lines = [
        f"::error file={escape_property(f.file)},line={f.line},"
        f"title={escape_property(f.title)}::{escape_data(f.message)}"
        for f in shown
    ]
    if rest:
        names = ", ".join(f.test for f in failures[MAX_ANNOTATIONS - 1 :][:20])
        lines.append(
            f"::error title={escape_property(f'{rest} more failed tests')}::"
            + escape_data(
                f"GitHub shows {MAX_ANNOTATIONS} annotations per step; {rest} more tests"
                f" failed: {names}{' ...' if rest > 20 else ''}. See the log or the job summary."
            )
        )
    return lines


def artifact_paths(report: Any) -> list[str]:
    """The failure artifacts the plugin saved for a failed report."""
    paths = getattr(report, ARTIFACTS_ATTRIBUTE, None) or []
    return [str(p) for p in paths]


def fallback(report: Any, problem: str) -> Failure:
    """An annotation at the test's ``def`` line, for a report :func:`failure` choked on."""
    name = str(getattr(report, "nodeid", "?"))
    location = getattr(report, "location", None) or ("", None, "")
    return Failure(
        name, str(getattr(report, "when", "call")), str(location[0]),
        int(location[1] or 0) + 1, f"{name.split('::', 1)[-1]} failed",
        f"(pytest-torch-ci could not build this annotation: {problem}; see the log)",
    )  # fmt: skip


#: pytest's order of outcomes in its summary line
OUTCOMES = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error")


def outcome_counts(outcomes: Mapping[str, int]) -> str:
    """``2 failed, 1360 passed, 28 skipped, 1 xfailed, 2 errors``: every outcome of the
    run, as pytest's summary line shows it (outcomes other plugins add come last)."""
    order = [*OUTCOMES, *sorted(set(outcomes) - set(OUTCOMES))]
    parts = []
    for outcome in order:
        count = outcomes.get(outcome, 0)
        if count:
            word = "errors" if outcome == "error" and count > 1 else outcome
            parts.append(f"{count} {word}")
    return ", ".join(parts) or "no tests ran"


def summary(
    failures: Sequence[Failure],
    outcomes: Mapping[str, int],
    tables: Mapping[str, Sequence[str]],
    artifacts: Sequence[str],
    notes: Sequence[str] = (),
) -> str:
    """The Markdown job summary; ``outcomes`` counts reports by pytest's categories."""
    counts = outcome_counts(outcomes)
    heading = counts if failures else f"no failures: {counts}"
    lines = [f"## pytest-torch: {heading}", ""]
    if failures:
        lines += ["| test | where | failure |", "|---|---|---|"]
        for f in failures:
            first = f.message.splitlines()[0] if f.message else ""
            cell = first.replace("|", "\\|")
            lines.append(f"| `{f.test}` | `{f.file}:{f.line}` ({f.phase}) | {cell} |")
        lines.append("")
    for title, table in tables.items():
        if table:
            lines += [f"### {title}", "", "```text", *table, "```", ""]
    if artifacts:
        lines += ["### Failure artifacts", ""]
        lines += [f"- `{path}`" for path in artifacts]
        lines.append("")
    if notes:
        lines += ["### Notes from pytest-torch-ci", ""]
        lines += [f"- {note}" for note in notes]
        lines.append("")
    return "\n".join(lines)
