"""GitHub Actions workflow commands and job summary for failed tests.

One ``::error file=…,line=…,title=…::message`` per failed test phase, pointing at the
failing line inside the test, escaped the way GitHub requires; at most
:data:`MAX_ANNOTATIONS` of them, the last one saying how many more failed (GitHub
shows ten error annotations per step). The job summary is Markdown for
``$GITHUB_STEP_SUMMARY``.

A failure a sibling plugin explained (core's ``add_section``, read back with
``pytest_torch.core.reports.explanations``) carries the explanation in its annotation,
its title and its summary row.

A collection error (a test module that fails on import, a broken ``conftest.py``) is
annotated at the file pytest could not collect, at the line its traceback has in that
file (a ``SyntaxError``'s own line), otherwise line 1: read from the exception where
pytest hands it over (:mod:`.failures`), else from the printed traceback.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pytest_torch.core.reports import Explanation, explanations, without_explanations

MAX_ANNOTATIONS = 10
#: lines of a failure message put into its annotation
MESSAGE_LINES = 12
#: lines of the error an explanation never pushes out of its annotation
ERROR_LINES_KEPT = 2
#: longest explanation sentence in a summary row
ROW_SENTENCE = 300
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
    #: the explanations of the family's plugins, short, for the summary row
    note: str = ""
    #: how many reports brought this failure (xdist workers each report a collection error)
    reported: int = 1


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


#: what the xdist controller's report prints before the failure (pytest adds it for a
#: report that came from a worker): "[gw1] linux -- Python 3.11.7 /usr/bin/python"
_WORKER_LINE = re.compile(r"\[[^\]\n]+\] [^\n]* -- Python [^\n]*\n?")


def longrepr_text(report: Any) -> str:
    """The text of the report's failure as the test left it: without the line on the
    xdist worker the controller prints above it, and without the family's sections
    appended to a string (they are shown on their own)."""
    longrepr = report.longrepr
    if isinstance(longrepr, str):
        text = longrepr
    elif isinstance(getattr(longrepr, "longrepr", None), str):  # a collection error's
        text = longrepr.longrepr
    else:
        text = report.longreprtext
        worker = _WORKER_LINE.match(text) if hasattr(report, "node") else None
        text = text[worker.end() :] if worker else text
    return without_explanations(text, report).strip()


def normalised(text: str) -> str:
    """``pkg.module.SomeError: text`` as ``SomeError: text``; pytest.fail's without
    ``Failed:``."""
    text = re.sub(r"^(?:[\w]+\.)+(\w+(?:Error|Exception|Failed)): ", r"\1: ", text)
    return text.removeprefix("Failed: ")


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return normalised(crash.message if crash is not None else longrepr_text(report))


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


def same_file(name: str | None, path: Path) -> bool:
    """Whether the file ``name`` is ``path``."""
    if not name:
        return False
    return os.path.normcase(os.path.realpath(name)) == os.path.normcase(os.path.realpath(path))


def reported_line(report: Any, test_file: Path, invocation: Path) -> int:
    """The failing line in ``test_file``: recorded on the report, else the deepest of its
    printed traceback in that file, else the line after the report's location."""
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


def shown_path(path: Path, rootdir: Path, default: str) -> str:
    """``path`` as GitHub names it: relative to ``$GITHUB_WORKSPACE`` (or the rootdir)."""
    workspace = Path(os.environ.get("GITHUB_WORKSPACE") or rootdir)
    try:
        return path.resolve().relative_to(workspace.resolve()).as_posix()
    except ValueError:
        return default


def failure(report: Any, rootdir: Path, invocation: Path) -> Failure:
    """The annotation of one failed report."""
    test_file = rootdir / report.location[0]
    shown = shown_path(test_file, rootdir, report.location[0])
    message = _message(report)
    explained = explanations(report)
    name = report.nodeid.split("::", 1)[-1]
    kind = explained_kind(explained) or kind_of(report.longreprtext) or kind_of(message)
    phase = "" if report.when == "call" else f" (error in {report.when})"
    title = f"{name}{phase}: {kind}" if kind else f"{name} failed{phase}"
    return Failure(
        report.nodeid, report.when, shown, reported_line(report, test_file, invocation), title,
        annotation_message(message.splitlines(), explained), row_note(explained),
    )  # fmt: skip


# (section title, pattern of its text, what happened) of the explanations the family's
# plugins add, for the annotation's title
_EXPLAINED: tuple[tuple[str, str, str], ...] = (
    (
        "torch-deterministic",
        r"has no deterministic implementation",
        "no deterministic implementation under --torch-deterministic",
    ),
    (
        "torch-deterministic",
        r"This failure mentions NaN",
        "NaN under --torch-deterministic, which fills uninitialised memory with NaN",
    ),
    ("torch-leak-check", r"\bRun (\d+) raised", "error in repeated run {0} of the leak check"),
)


def _what_happened(title: str, text: str) -> str | None:
    for known, pattern, kind in _EXPLAINED:
        match = re.search(pattern, text) if title == known else None
        if match:
            return kind.format(*match.groups())
    return None


def explained_kind(explained: Sequence[Explanation]) -> str | None:
    """What happened, in a few words, for a failure the family's plugins explained (the
    title of an explanation not known here)."""
    kinds = (_what_happened(title, text) for title, text in explained)
    return next((kind for kind in kinds if kind), explained[0].title if explained else None)


def _capped(lines: list[str], room: int, what: str = "") -> list[str]:
    if len(lines) <= room:
        return lines
    return [*lines[:room], f"... ({len(lines) - room} more lines{what} in the log)"]


def annotation_message(error: list[str], explained: Sequence[Explanation]) -> str:
    """The error's lines, then the explanations (each headed by its title), within
    :data:`MESSAGE_LINES`: the explanations keep their place and the error's later lines
    give way, down to its first :data:`ERROR_LINES_KEPT`."""
    added: list[str] = []
    for title, text in explained:
        lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
        if lines:
            added += [f"{title}: {lines[0]}", *lines[1:]]
    if not added:
        return "\n".join(_capped(error, MESSAGE_LINES))
    kept = min(len(error), max(ERROR_LINES_KEPT, MESSAGE_LINES - len(added)))
    head = _capped(error, kept, " of the error")
    return "\n".join([*head, *_capped(added, max(MESSAGE_LINES - kept, 1))])


_SENTENCE = re.compile(r"(.+?[.!?])(?=\s+[^a-z\s]|\s*$)")
_COMMAND = re.compile(r"(?:^|:\s+)(?:python -m )?pytest\s")


def row_note(explained: Sequence[Explanation]) -> str:
    """The explanations in a few words for the summary row: the title and first
    sentence of each, and its command to run the test again where it gives one."""
    notes = []
    for title, text in explained:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if not lines:
            continue
        match = _SENTENCE.match(lines[0])
        sentence = match.group(1) if match else lines[0]
        if len(sentence) > ROW_SENTENCE:
            sentence = sentence[: ROW_SENTENCE - 3] + "..."
        kind = _what_happened(title, text)
        note = f"{title} ({kind}): {sentence}" if kind else f"{title}: {sentence}"
        command = next((line for line in lines if _COMMAND.search(line)), None)
        if command is not None and command not in sentence:
            note += f" {'rerun: ' if command.startswith(('pytest', 'python')) else ''}{command}"
        notes.append(note)
    return "<br>".join(notes)


# collection errors: a module that fails on import, a broken conftest.py

#: a frame of a traceback Python printed (``--tb=native``)
_NATIVE_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)', re.M)


def _traceback(report: Any, invocation: Path) -> list[tuple[Path, int]]:
    """The files and lines of the printed traceback, deepest first."""
    entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", [])
    found = [
        (Path(location.path), int(location.lineno))
        for entry in entries
        for location in [getattr(entry, "reprfileloc", None)]
        if location is not None
    ]
    if not found:
        found = [(Path(m[1]), int(m[2])) for m in _NATIVE_FRAME.finditer(longrepr_text(report))]
    return [(path if path.is_absolute() else invocation / path, n) for path, n in found[::-1]]


def _located(report: Any, rootdir: Path, invocation: Path) -> tuple[Path, int | None]:
    """The collector's file and the deepest line of the traceback in it; for a folder
    (its ``conftest.py`` or ``__init__.py`` failed), the deepest file inside it."""
    path: Path = rootdir / str(report.fspath)
    frames = _traceback(report, invocation)
    if path.is_dir():
        folder = path.resolve()
        inside = (f for f in frames if f[0].resolve().is_relative_to(folder) and f[0].is_file())
        return next(inside, (path, None))
    return path, next((n for file, n in frames if same_file(str(file), path)), None)


def _collect_message(report: Any) -> str:
    """The exception first: pytest prints a SyntaxError or ImportError of a module as
    text, after the frames of its own importer, with the user's error on its ``E``
    lines."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return normalised(crash.message)
    text = longrepr_text(report)
    raised = textwrap.dedent(
        "\n".join(line[1:] for line in text.splitlines() if line[:2] in ("E", "E "))
    ).splitlines()
    if not any(line.strip() for line in raised):
        return text
    headline = next((i for i in reversed(range(len(raised))) if raised[i][:1] not in ("", " ")), -1)
    return "\n".join([raised[headline], *raised[:headline], *raised[headline + 1 :]])


def collect_failure(report: Any, rootdir: Path, invocation: Path) -> Failure:
    """The annotation of a collection error."""
    path, line = _located(report, rootdir, invocation)
    recorded = getattr(report, LINE_ATTRIBUTE, None)  # read from the exception
    if isinstance(recorded, int) and recorded > 0:
        line = recorded
    default = path.relative_to(rootdir).as_posix() if path.is_relative_to(rootdir) else str(path)
    name = report.nodeid or "."
    return Failure(
        name, "collect", shown_path(path, rootdir, default), line or 1,
        f"error collecting {name}", annotation_message(_collect_message(report).splitlines(), []),
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


#: pytest's order of outcomes in its summary line (its terminal's KNOWN_TYPES)
OUTCOMES = (
    "failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "error",
    "subtests passed", "subtests failed", "subtests skipped",
)  # fmt: skip


def outcome_counts(outcomes: Mapping[str, int]) -> str:
    """``2 failed, 1360 passed, 28 skipped, 1 xfailed, 3 warnings, 2 errors``: every
    outcome of the run, as pytest's summary line shows it (outcomes other plugins add
    come last, in the order they first happened)."""
    order = [*OUTCOMES, *(outcome for outcome in outcomes if outcome not in OUTCOMES)]
    parts = []
    for outcome in order:
        count = outcomes.get(outcome, 0)
        if count:
            word = outcome
            if outcome in ("error", "warnings"):  # pytest's plurals
                word = outcome.removesuffix("s") + ("s" if count != 1 else "")
            parts.append(f"{count} {word}")
    return ", ".join(parts) or "no tests ran"


def _row(f: Failure) -> str:
    first = f.message.splitlines()[0] if f.message else ""
    if f.reported > 1:  # pytest counts each in its summary line
        first += f" (reported by {f.reported} xdist workers)"
    cell = "<br>".join(part for part in (first, f.note) if part).replace("|", "\\|")
    return f"| `{f.test}` | `{f.file}:{f.line}` ({f.phase}) | {cell} |"


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
        lines += [_row(f) for f in failures]
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
