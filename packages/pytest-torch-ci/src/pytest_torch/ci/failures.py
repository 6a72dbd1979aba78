"""What a failed test phase leaves in its report: the failing line (for the GitHub
annotation) and, with a folder for them, the failure artifacts of its tensor mismatches
(saved by :mod:`.artifacts`, embedded in the pytest-html report when there is one);
what a collection error leaves: the line where collecting its file failed.

Whatever goes wrong here becomes a note (:mod:`.notes`): the user's failure is reported
whatever happens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_torch.ci import artifacts, html_report
from pytest_torch.ci.annotations import (
    ARTIFACTS_ATTRIBUTE,
    LINE_ATTRIBUTE,
    failing_line,
    same_file,
)
from pytest_torch.ci.notes import add_note, why
from pytest_torch.core.ids import plain_nodeid

if TYPE_CHECKING:
    import pytest

ARTIFACTS_PREFIX = "failure artifacts (heatmaps, tensors)"


def on_failure(
    item: pytest.Item,
    call: pytest.CallInfo[None],
    report: pytest.TestReport,
    announced: Sequence[Any],
    folder: Path | None,
    root: Path,
) -> None:
    """Record the failing line and save the failure artifacts in ``folder`` (``None``:
    none are saved), ``announced`` being the mismatches the phase announced; notes for
    what could not be done."""
    try:
        notes = _process(item, call, report, announced, folder, root)
    except Exception as problem:  # the user's failure is reported whatever happens here
        notes = [f"pytest-torch-ci: could not process this failure ({why(problem)})"]
    if notes:
        add_note(report, notes)


def on_collect_error(path: Path, error: BaseException, report: pytest.CollectReport) -> None:
    """Record the line in ``path`` (the file pytest could not collect) where collecting
    it failed, for the GitHub annotation; a note if that fails."""
    if not path.is_file():  # a folder: its conftest.py, read from the printed traceback
        return
    try:
        line = error_line(error, path)
        if line is not None:
            report.__dict__[LINE_ATTRIBUTE] = line
    except Exception as problem:
        add_note(report, [f"GitHub annotation: the failing line was not found ({why(problem)})"])


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, then what caused it (pytest raises its own CollectError from the
    user's SyntaxError or ImportError)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def error_line(error: BaseException, path: Path) -> int | None:
    """The line in ``path`` where collecting it failed: a SyntaxError's own line, or
    the deepest frame in that file of the error or what caused it."""
    for current in _chain(error):
        if isinstance(current, SyntaxError) and same_file(current.filename, path):
            return current.lineno
        line = failing_line(current, path)
        if line is not None:
            return line
    return None


def _process(
    item: pytest.Item,
    call: pytest.CallInfo[None],
    report: pytest.TestReport,
    announced: Sequence[Any],
    folder: Path | None,
    root: Path,
) -> list[str]:
    error = call.excinfo.value if call.excinfo is not None else None
    notes = []
    if error is not None:
        try:
            line = failing_line(error, item.config.rootpath / report.location[0])
            if line is not None:
                report.__dict__[LINE_ATTRIBUTE] = line
        except Exception as problem:
            notes.append(f"GitHub annotation: the failing line was not found ({why(problem)})")
    if folder is None:
        return notes
    try:
        pairs, caught_earlier = artifacts.of_failure(error, announced)
        if not pairs:
            return notes
        written = artifacts.write(folder, plain_nodeid(item), pairs)
    except Exception as problem:
        notes.append(
            f"failure artifacts: nothing saved in {folder} ({why(problem)})."
            " Check that the folder is writable and has space."
        )
        return notes
    shown = artifacts.shown(written.paths, root)
    report.__dict__[ARTIFACTS_ATTRIBUTE] = shown
    if shown:
        what = " of mismatches caught earlier in the test" if caught_earlier else ""
        notes.append(f"{ARTIFACTS_PREFIX}{what}: {', '.join(shown)}")
    notes += [f"failure artifacts: {note}" for note in written.notes]
    pictures = [p for p in written.paths if p.suffix == ".png"]
    if pictures and item.config.pluginmanager.has_plugin(html_report.PLUGIN_NAME):
        try:
            html_report.embed_pictures(report, pictures)
        except Exception as problem:
            notes.append(f"HTML report: heatmaps not embedded ({why(problem)})")
    return notes
