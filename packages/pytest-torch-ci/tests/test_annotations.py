"""GitHub annotations and the job summary, in real runs."""

from __future__ import annotations

import pytest

from pytest_torch.ci.annotations import commands, escape_data, escape_property, kind_of

SUITE = """
import pytest
import torch


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown broke")


def test_values():
    expected = torch.zeros(3)
    value = expected + 1
    torch.testing.assert_close(value, expected)


def test_setup(broken):
    pass


def test_teardown(bad_teardown):
    pass


def test_message():
    assert False, "100% wrong,\\nsecond line: here"


def test_passes():
    pass
"""


def _errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("::error ")]


def test_one_annotation_per_failed_phase_at_the_failing_line(pytester, run, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    result = run("-q", "--torch-github-annotations")
    result.assert_outcomes(failed=2, passed=2, errors=2)
    errors = _errors(result)
    assert len(errors) == 4
    source = (pytester.path / "test_suite.py").read_text().splitlines()

    def line(text: str) -> int:
        return 1 + next(i for i, code in enumerate(source) if text in code)

    values, setup, teardown, message = errors
    at = f"line={line('torch.testing.assert_close(value')}"
    assert values.startswith(f"::error file=test_suite.py,{at},title=test_values%3A tensors not")
    assert "::AssertionError: Tensor-likes are not close!%0A%0AMismatched elements: 3 / 3" in values
    at = f"line={line('fixture broke')}"  # the failing line, in the fixture of this file
    assert setup.startswith(f"::error file=test_suite.py,{at},title=test_setup failed (error in")
    at = f"line={line('teardown broke')}"
    assert teardown.startswith(f"::error file=test_suite.py,{at},title=test_teardown failed")
    at = f"line={line('100% wrong')}"
    assert message.startswith(f"::error file=test_suite.py,{at},title=test_message failed::")
    assert "100%25 wrong,%0A  second line: here" in message  # data: % CR LF escaped only


def test_off_by_default_on_under_github_actions_and_switchable(pytester, run, monkeypatch):
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert _errors(run()) == []
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert len(_errors(run())) == 4
    assert _errors(run("--torch-github-annotations=off")) == []
    pytester.makeini("[pytest]\ntorch_github_annotations = off\n")
    assert _errors(run()) == []
    result = run("--torch-github-annotations=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-github-annotations: expected on, off or auto*"])


def test_a_wrong_ini_value_is_named_with_its_file(pytester, run):
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeini("[pytest]\ntorch_github_annotations = maybe\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*torch_github_annotations (in tox.ini): expected on, off or auto, got 'maybe'*"]
    )


def test_at_most_ten_annotations_and_one_for_the_rest(pytester, run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(14))
        def test_fails(i):
            assert i < 0
        """
    )
    errors = _errors(run("-q", "--torch-github-annotations"))
    assert len(errors) == 10
    assert errors[-1].startswith("::error title=5 more failed tests::GitHub shows 10 annotations")


def test_job_summary(pytester, run, monkeypatch):
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_suite=SUITE)
    run("--torch-github-annotations", "--torch-failure-artifacts=arts")
    text = summary.read_text()
    assert text.startswith("## pytest-torch: 2 failed, 2 passed, 2 errors\n")
    assert "| `test_suite.py::test_values` | `test_suite.py:" in text
    assert "(call) | AssertionError: Tensor-likes are not close! |" in text
    assert "(setup) | RuntimeError: fixture broke |" in text
    assert "### Failure artifacts\n\n- `arts/test_suite.py_test_values/1-output.png`" in text


def test_job_summary_counts_every_outcome_pytest_counts(pytester, run, monkeypatch):
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_passes(i):
            pass

        def test_skipped():
            pytest.skip("not here")

        @pytest.mark.xfail(reason="known")
        def test_known_bug():
            assert False

        @pytest.mark.xfail(reason="fixed since")
        def test_fixed():
            pass

        def test_other():
            pass
        """
    )
    result = run("--torch-github-annotations", "-k", "not other")
    result.assert_outcomes(passed=3, skipped=1, xfailed=1, xpassed=1, deselected=1)
    assert summary.read_text().startswith(
        "## pytest-torch: no failures: 3 passed, 1 skipped, 1 deselected, 1 xfailed, 1 xpassed\n"
    )


def test_annotations_come_once_under_xdist(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_ci", "-n", "2", "--torch-github-annotations"
    )
    errors = _errors(result)
    assert len(errors) == 4 and len(set(errors)) == 4


def test_escaping_and_kinds():
    assert escape_data("50%\r\nok") == "50%25%0D%0Aok"
    assert escape_property("a:b,c") == "a%3Ab%2Cc"
    assert kind_of("latency budget exceeded: median 2 ms > budget 1 ms (+42.0 %)") == (
        "latency budget exceeded +42.0 %"
    )
    assert kind_of(
        "performance regression in t:\n  latency (median): 2 ms vs (+42.0 %); limit"
    ) == ("latency regression +42.0 %")
    assert kind_of("peak memory on cpu was 9 MiB, over the torch_max_memory budget of 4 MiB") == (
        "memory budget exceeded on cpu"
    )
    assert kind_of("memory leak: each of the 5 runs") == "memory leak"
    assert kind_of("something else") is None
    assert commands([]) == []


@pytest.mark.parametrize("style", ["auto", "long", "short", "native", "line", "no"])
def test_the_failing_line_whatever_tb_says(pytester, run, monkeypatch, style):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(
        helpers="import torch\n\n\ndef check(x):\n    torch.testing.assert_close(x, x + 1)\n"
    )
    pytester.makepyfile(
        test_helper="from helpers import check\nimport torch\n\n\ndef test_h():\n"
        "    x = torch.zeros(2)\n    check(x)\n"
    )
    errors = _errors(run("-q", "--torch-github-annotations", f"--tb={style}"))
    source = (pytester.path / "test_suite.py").read_text().splitlines()

    def line(text: str) -> int:
        return 1 + next(i for i, code in enumerate(source) if text in code)

    where = [e.split(",title=")[0] for e in errors]
    assert where == [
        "::error file=test_helper.py,line=7",  # the call into the helper of another file
        f"::error file=test_suite.py,line={line('torch.testing.assert_close(value')}",
        f"::error file=test_suite.py,line={line('fixture broke')}",
        f"::error file=test_suite.py,line={line('teardown broke')}",
        f"::error file=test_suite.py,line={line('100% wrong')}",
    ]


OFFERED_TABLES = """
from pytest_torch.core.tables import ReportTable


def pytest_torch_report_tables(config):
    def broken():
        raise KeyError("records")

    return [ReportTable("Performance", broken), ReportTable("Widgets", lambda: ["w  1", "x  2"])]
"""


def test_a_table_or_summary_that_fails_is_a_note_not_an_error(pytester, run, monkeypatch):
    """Tables come from the plugins that offer them (pytest_torch_report_tables); one
    that cannot be built is a note, the others are still in the summary."""
    pytester.makeconftest(OFFERED_TABLES)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(test_suite=SUITE)
    result = run("--torch-github-annotations")
    result.assert_outcomes(failed=2, passed=2, errors=2)
    written = summary.read_text()
    assert "- the performance table could not be built (KeyError: 'records')" in written
    assert "Widgets" in written and "w  1\nx  2" in written
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path))  # a folder: not writable
    result = run("--torch-github-annotations")
    result.assert_outcomes(failed=2, passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "pytest-torch-ci: the performance table could not be built (KeyError: 'records')",
            "pytest-torch-ci: the job summary was not written to $GITHUB_STEP_SUMMARY (*):"
            " IsADirectoryError: *. The annotations above still name every failure.",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()
