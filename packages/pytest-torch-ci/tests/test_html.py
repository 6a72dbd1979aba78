"""With pytest-html: heatmaps embedded in failing tests, the family's tables on top."""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_html", reason="needs pytest-html installed")

SUITE = """
import torch


def test_mismatch():
    expected = torch.zeros(8, 8)
    actual = expected.clone()
    actual[2, 5] = 1
    torch.testing.assert_close(actual, expected)


def test_passes():
    pass
"""


def test_failing_tests_carry_their_heatmaps(pytester, run):
    pytester.makepyfile(test_suite=SUITE)
    # pytest-html needs its pytest-metadata plugin too when autoload is off
    result = run("-p", "metadata", "-p", "html", "--html=out/report.html", "--self-contained-html")
    result.assert_outcomes(failed=1, passed=1)
    page = (pytester.path / "out" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 1
    # without --torch-failure-artifacts the files go beside the report
    folder = (
        pytester.path / "out" / "report-torch-failure-artifacts" / "test_suite.py_test_mismatch"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["1-output.png", "1-output.pt"]


def test_the_peak_memory_table_is_in_the_report(pytester):
    pytest.importorskip("pytest_torch.memory", reason="needs pytest-torch-memory installed")
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.torch_max_memory(mb=64)
        def test_alloc():
            torch.ones(2**20, dtype=torch.uint8)
        """
    )
    pytester.runpytest(
        "-p", "torch_ci", "-p", "torch_memory", "-p", "metadata", "-p", "html", "--html=report.html",
        "--self-contained-html",
    ).assert_outcomes(passed=1)  # fmt: skip
    page = (pytester.path / "report.html").read_text()
    assert "<h2>pytest-torch: Peak memory</h2><pre>device  test" in page
