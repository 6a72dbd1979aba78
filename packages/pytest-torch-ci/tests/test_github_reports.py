"""GitHub annotations and the job summary for what is not a plain test failure: modules
that fail to collect, reports whose text is a string (strict XPASS, pytest.fail without
a traceback) under xdist, and failures the family's plugins explained."""

from __future__ import annotations

import re

import pytest

from pytest_torch.ci.annotations import (
    MESSAGE_LINES,
    annotation_message,
    explained_kind,
    row_note,
)
from pytest_torch.core.reports import Explanation

COLLECTION = {
    "test_broken": "import torch\n\nWEIGHTS = torch.load('missing-checkpoint.pt')\n\n\n"
    "def test_weights():\n    assert WEIGHTS\n",
    "test_cuda_only": "import pytest\n\npytest.skip('needs CUDA', allow_module_level=True)\n",
    "test_imports": "import torch\nfrom pytest_torch_nonexistent import helpers\n",
    "test_ok": "def test_a():\n    pass\n\n\ndef test_b():\n    pass\n\n\n"
    "def test_c():\n    assert 1 == 2\n",
    "test_syntax": "import torch\n\n\ndef test_shapes():\n    assert torch.ones(2).shape == (2,\n",
}
BROKEN = {  # the annotation of each module that does not import
    "test_broken.py": "line=3,title=error collecting test_broken.py::FileNotFoundError:"
    " [Errno 2] No such file or directory: 'missing-checkpoint.pt'",
    "test_imports.py": "line=2,title=error collecting test_imports.py::ModuleNotFoundError:"
    " No module named 'pytest_torch_nonexistent'",
    "test_syntax.py": "line=5,title=error collecting test_syntax.py::SyntaxError: '(' was"
    " never closed%0A",
}


def _errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("::error ")]


def _pytest_counts(result: pytest.RunResult) -> str:
    """pytest's own final line, without its duration: ``1 failed, 2 passed, 2 errors``."""
    for line in reversed(result.outlines):
        match = re.match(r"^=*\s*(.+?) in [\d.]+s\b", line)
        if match:
            return match.group(1)
    raise AssertionError("no final counts line in:\n" + "\n".join(result.outlines))


def _heading(summary: str) -> str:
    first = summary.splitlines()[0]
    return first.removeprefix("## pytest-torch: ").removeprefix("no failures: ")


def _rows(summary: str) -> list[str]:
    return [line for line in summary.splitlines() if line.startswith("| `")]


@pytest.mark.parametrize("keep_going", [False, True], ids=["stops", "continues"])
def test_collection_errors_are_counted_annotated_and_in_the_summary(
    pytester, run, monkeypatch, keep_going
):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(**COLLECTION)
    args = ["--continue-on-collection-errors"] if keep_going else []
    result = run("-q", "--torch-github-annotations", *args)
    if keep_going:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert _pytest_counts(result) == "1 failed, 2 passed, 1 skipped, 3 errors"
    else:
        assert result.ret == pytest.ExitCode.INTERRUPTED
        assert _pytest_counts(result) == "1 skipped, 3 errors"
    text = summary.read_text()
    assert text.startswith(f"## pytest-torch: {_pytest_counts(result)}\n")
    errors = _errors(result)
    for module, annotation in BROKEN.items():  # each once, at its file and line
        (found,) = [e for e in errors if e.startswith(f"::error file={module},")]
        assert found.startswith(f"::error file={module},{annotation}"), found
    assert len(errors) == len(BROKEN) + keep_going
    rows = _rows(text)
    assert rows[:3] == [
        "| `test_broken.py` | `test_broken.py:3` (collect) | FileNotFoundError: [Errno 2] No"
        " such file or directory: 'missing-checkpoint.pt' |",
        "| `test_imports.py` | `test_imports.py:2` (collect) | ModuleNotFoundError: No module"
        " named 'pytest_torch_nonexistent' |",
        "| `test_syntax.py` | `test_syntax.py:5` (collect) | SyntaxError: '(' was never closed |",
    ]
    assert rows[3:] == (
        ["| `test_ok.py::test_c` | `test_ok.py:10` (call) | assert 1 == 2 |"] if keep_going else []
    )


@pytest.mark.parametrize("style", ["auto", "long", "short", "native", "line", "no"])
def test_a_collection_error_is_at_its_line_whatever_tb_says(pytester, run, monkeypatch, style):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    pytester.makepyfile(**COLLECTION)
    errors = _errors(run("-q", "--torch-github-annotations", f"--tb={style}"))
    assert [e.split(",title=")[0] for e in errors] == [
        f"::error file={module},{annotation.split(',')[0]}" for module, annotation in BROKEN.items()
    ]


def test_a_broken_conftest_is_annotated_at_its_own_file(pytester, run, monkeypatch):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    folder = pytester.mkdir("models")
    (folder / "conftest.py").write_text("import os\n\nROOT = os.environ['MODEL_ROOT']\n")
    (folder / "test_model.py").write_text("def test_model():\n    pass\n")
    monkeypatch.delenv("MODEL_ROOT", raising=False)
    result = run("-q", "--torch-github-annotations")
    assert _errors(result) == [
        "::error file=models/conftest.py,line=3,title=error collecting models::KeyError:"
        " 'MODEL_ROOT'"
    ]


def test_skipped_modules_and_warnings_count_as_pytest_counts_them(pytester, run, monkeypatch):
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(
        test_cuda_only=COLLECTION["test_cuda_only"],
        test_warns="import warnings\n\n\ndef test_old_api():\n"
        "    warnings.warn('use the new API', DeprecationWarning)\n",
    )
    result = run("--torch-github-annotations")
    result.assert_outcomes(passed=1, skipped=1, warnings=1)
    assert _pytest_counts(result) == "1 passed, 1 skipped, 1 warning"
    assert summary.read_text().startswith("## pytest-torch: no failures: 1 passed, 1 skipped, 1 warning\n")  # fmt: skip
    assert _errors(result) == []


def test_collection_errors_under_xdist(pytester, monkeypatch):
    """Every worker collects every module, so a collection error reaches the controller
    once per worker (pytest-xdist#1140, where it compares reports by identity): the
    summary counts what pytest counts, and each error gets one annotation and one row."""
    pytest.importorskip("xdist")
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(**COLLECTION)
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_ci", "-n", "2", "--continue-on-collection-errors",
        "--torch-github-annotations",
    )  # fmt: skip
    counts = _pytest_counts(result)
    assert counts.startswith("1 failed, 2 passed, 1 skipped, ")
    text = summary.read_text()
    assert _heading(text) == counts
    errors = _errors(result)
    for module, annotation in BROKEN.items():
        (found,) = [e for e in errors if e.startswith(f"::error file={module},")]
        assert found.startswith(f"::error file={module},{annotation}"), found
    assert len(errors) == len(BROKEN) + 1
    rows = [row for row in _rows(text) if "(collect)" in row]
    assert len(rows) == len(BROKEN)
    reported = [re.search(r"\(reported by (\d+) xdist workers\)", row) for row in rows]
    assert sum(int(found[1]) if found else 1 for found in reported) == int(
        re.search(r"(\d+) errors?", counts)[1]  # type: ignore[index]
    )


STRING_REPORTS = """
import pytest


@pytest.fixture
def checkpoint():
    raise FileNotFoundError("weights.pt")


def test_loads(checkpoint):
    pass


def test_gave_up():
    pytest.fail("the model diverged after 3 steps", pytrace=False)


@pytest.mark.xfail(reason="bug 12: NaN in fp16 softmax", strict=True)
def test_fp16_softmax():
    pass
"""


@pytest.mark.parametrize("mode", ["serial", "xdist"])
def test_string_reports_show_pytests_text_not_the_xdist_worker(pytester, run, monkeypatch, mode):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_x=STRING_REPORTS)
    args = ("--torch-github-annotations", "--tb=line")
    if mode == "serial":
        result = run(*args)
    else:
        pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess("-p", "xdist", "-p", "torch_ci", "-n", "2", *args)
    result.assert_outcomes(failed=2, errors=1)
    assert sorted(_errors(result)) == [
        "::error file=test_x.py,line=14,title=test_gave_up failed::the model diverged after 3 steps",
        "::error file=test_x.py,line=17,title=test_fp16_softmax failed::[XPASS(strict)] bug 12:"
        " NaN in fp16 softmax",
        "::error file=test_x.py,line=6,title=test_loads failed (error in setup)::"
        "FileNotFoundError: weights.pt",
    ]
    assert sorted(_rows(summary.read_text())) == [
        "| `test_x.py::test_fp16_softmax` | `test_x.py:17` (call) | [XPASS(strict)] bug 12: NaN"
        " in fp16 softmax |",
        "| `test_x.py::test_gave_up` | `test_x.py:14` (call) | the model diverged after 3 steps |",
        "| `test_x.py::test_loads` | `test_x.py:6` (setup) | FileNotFoundError: weights.pt |",
    ]


REFUSED = """
import torch


def test_scatter_indices(torch_seed):
    out = torch.zeros(4)
    out.put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
"""


@pytest.mark.parametrize("mode", ["serial", "xdist"])
def test_a_refusal_under_torch_deterministic_is_explained_on_github(
    pytester, run, monkeypatch, mode
):
    """put_ without accumulate has no deterministic implementation on the CPU either:
    torch's error blames the user's code, pytest-torch-determinism's section says the
    flag did it, and the annotation, its title and the summary row say so too."""
    pytest.importorskip("pytest_torch.determinism", reason="needs pytest-torch-determinism")
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_x=REFUSED)
    args = ("-p", "torch_determinism", "--torch-github-annotations", "--torch-deterministic")
    if mode == "serial":
        result = run(*args)
    else:
        pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess("-p", "xdist", "-p", "torch_ci", "-n", "2", *args)
    result.assert_outcomes(failed=1)
    (error,) = _errors(result)
    head, message = error.split("::", 2)[1:]
    assert head == (
        "error file=test_x.py,line=6,title=test_scatter_indices%3A no deterministic"
        " implementation under --torch-deterministic"
    )
    lines = message.split("%0A")
    assert lines[0].startswith("RuntimeError: put_ does not have a deterministic implementation")
    assert lines[1].startswith(
        "torch-deterministic: --torch-deterministic turned deterministic algorithms on for"
        " this test (it uses torch_seed)"
    )
    assert re.search(r"%0A[^%]*: pytest .*test_x\.py::test_scatter_indices", message)
    (row,) = _rows(summary.read_text())
    error_line, note = row.split("<br>")
    assert error_line.startswith(
        "| `test_x.py::test_scatter_indices` | `test_x.py:6` (call) | RuntimeError: put_ does"
    )
    assert note.startswith(
        "torch-deterministic (no deterministic implementation under --torch-deterministic):"
        " --torch-deterministic turned deterministic algorithms on for this test"
    )
    assert re.search(r"\. [^.]*: pytest .*test_x\.py::test_scatter_indices.* \|$", note)


def test_an_explanation_of_a_string_report_is_shown_once(pytester, run, monkeypatch):
    """A plugin's section appended to a string report (a strict XPASS) is the row's
    note, not part of pytest's text."""
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makeconftest(
        """
        import pytest
        from pytest_torch.core.reports import add_section

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            if report.failed:
                add_section(report, "torch-example", "The mark is out of date. Really.")
            return report
        """
    )
    pytester.makepyfile(test_x=STRING_REPORTS)
    run("--torch-github-annotations", "-k", "fp16")
    (row,) = _rows(summary.read_text())
    assert row.endswith(
        "| [XPASS(strict)] bug 12: NaN in fp16 softmax<br>torch-example: The mark is out of date. |"
    )


def test_the_explanation_keeps_its_place_within_the_line_cap():
    error = [f"error line {i}" for i in range(1, 21)]
    explained = [Explanation("torch-deterministic", "what happened\nRun it as before with: x")]
    lines = annotation_message(error, explained).splitlines()
    assert lines == [
        *error[: MESSAGE_LINES - 2],
        f"... ({20 - (MESSAGE_LINES - 2)} more lines of the error in the log)",
        "torch-deterministic: what happened",
        "Run it as before with: x",
    ]
    long = [Explanation("torch-leak-check", "\n".join(f"why {i}" for i in range(30)))]
    lines = annotation_message(error, long).splitlines()
    assert lines[:3] == ["error line 1", "error line 2", "... (18 more lines of the error in the log)"]  # fmt: skip
    assert lines[3] == "torch-leak-check: why 0"
    assert lines[-1] == f"... ({30 - (MESSAGE_LINES - 2)} more lines in the log)"
    assert annotation_message(["short error"], []) == "short error"


def test_what_happened_and_the_row_note_of_each_known_explanation():
    leak = Explanation(
        "torch-leak-check",
        "--torch-leak-check runs every test's body up to 6 times to watch its memory. Run 2"
        " raised the error above; the first run passed.\nEvery run gets the same fixtures.\n"
        "Run it as before with: pytest test_x.py::test_y (without --torch-leak-check)",
    )
    assert explained_kind([leak]) == "error in repeated run 2 of the leak check"
    assert row_note([leak]) == (
        "torch-leak-check (error in repeated run 2 of the leak check): --torch-leak-check runs"
        " every test's body up to 6 times to watch its memory. Run it as before with: pytest"
        " test_x.py::test_y (without --torch-leak-check)"
    )
    other = Explanation("torch-other", "pytest test_x.py::test_y -p no:other")
    assert explained_kind([other]) == "torch-other"
    assert row_note([other]) == "torch-other: pytest test_x.py::test_y -p no:other"
    assert explained_kind([]) is None and row_note([]) == ""
