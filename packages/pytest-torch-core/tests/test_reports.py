"""add_section: the explanation under the failure, and recorded for other reporters."""

from __future__ import annotations

import json

import pytest

from pytest_torch.core.reports import (
    EXPLANATIONS_ATTRIBUTE,
    Explanation,
    add_section,
    explanations,
    without_explanations,
)

EXPLAINING = """
import json

import pytest

from pytest_torch.core.reports import add_section, explanations


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        add_section(report, "torch-example", f"{item.name} was explained.\\nRun it again.")
    return report


def pytest_configure(config):
    global CONTROLLER
    CONTROLLER = not hasattr(config, "workerinput")  # under xdist: the controller's reports


def pytest_runtest_logreport(report):
    if report.failed and CONTROLLER:
        with open("explained.jsonl", "a") as out:
            out.write(json.dumps([report.nodeid, explanations(report)]) + "\\n")
"""

SUITE = """
import pytest


def test_raises():
    raise ValueError("no")


def test_fails_without_traceback():
    pytest.fail("gave up", pytrace=False)


@pytest.mark.xfail(reason="fixed since", strict=True)
def test_strict_xpass():
    pass
"""


def _report(longrepr: object) -> pytest.TestReport:
    return pytest.TestReport(
        "test_x.py::test_y", ("test_x.py", 0, "test_y"), {}, "failed", longrepr, "call"
    )


@pytest.mark.parametrize("mode", ["serial", "xdist"])
def test_explanations_are_in_the_terminal_and_travel_with_the_report(pytester, run, mode):
    pytester.makeconftest(EXPLAINING)
    pytester.makepyfile(test_x=SUITE)
    if mode == "serial":
        result = run("-p", "no:cacheprovider")
    else:
        pytest.importorskip("xdist")
        result = pytester.runpytest_subprocess("-p", "xdist", "-p", "torch_core", "-n", "2")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*- torch-example -*", "test_raises was explained."])
    lines = (pytester.path / "explained.jsonl").read_text().splitlines()
    recorded = sorted(json.loads(line) for line in lines)
    assert recorded == [
        [f"test_x.py::{name}", [["torch-example", f"{name} was explained.\nRun it again."]]]
        for name in ("test_fails_without_traceback", "test_raises", "test_strict_xpass")
    ]


def test_a_string_report_keeps_the_section_in_its_text_and_can_drop_it():
    report = _report("[XPASS(strict)] fixed since")
    add_section(report, "torch-example", "Explained.")
    add_section(report, "torch-other", "Also.")
    assert report.longrepr == (
        "[XPASS(strict)] fixed since\n---------- torch-example ----------\nExplained."
        "\n---------- torch-other ----------\nAlso."
    )
    assert explanations(report) == [
        Explanation("torch-example", "Explained."),
        Explanation("torch-other", "Also."),
    ]
    assert without_explanations(str(report.longrepr), report) == "[XPASS(strict)] fixed since"


def test_a_report_without_a_representation_gets_a_section():
    report = _report(None)
    add_section(report, "torch-example", "Explained.")
    assert report.sections == [("torch-example", "Explained.")]
    assert explanations(report) == [Explanation("torch-example", "Explained.")]


def test_what_is_not_a_recorded_explanation_is_left_out():
    report = _report("boom")
    assert explanations(report) == []
    report.__dict__[EXPLANATIONS_ATTRIBUTE] = "not a list"
    assert explanations(report) == []
    report.__dict__[EXPLANATIONS_ATTRIBUTE] = [
        {"title": "t", "text": "x"},
        ["t", "x"],
        {"title": 1},
    ]
    assert explanations(report) == [Explanation("t", "x")]
    add_section(report, "torch-example", "Explained.")  # after other code's entries
    assert explanations(report)[-1] == Explanation("torch-example", "Explained.")
