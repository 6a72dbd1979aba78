"""--torch-failure-artifacts in real runs, for both assert_close functions."""

from __future__ import annotations

import pytest
import torch

SUITE = """
import torch
import torch.testing

from pytest_torch.core.compare import assert_close


def test_ours():
    expected = torch.zeros(4, 4)
    actual = expected.clone()
    actual[1, 2] = 1.0
    assert_close({"logits": actual}, {"logits": expected})


def test_torch_testing():
    expected = {"a": torch.zeros(3), "b": [torch.ones(2, 2), torch.arange(6.0)]}
    actual = {"a": torch.zeros(3), "b": [torch.ones(2, 2), torch.arange(6.0) * 2]}
    torch.testing.assert_close(actual, expected)


def test_passes():
    torch.testing.assert_close(torch.ones(2), torch.ones(2))
"""


def test_artifacts_for_both_assert_close_functions(pytester, run):
    pytester.makepyfile(test_suite=SUITE)
    result = run("--torch-failure-artifacts=artifacts")
    result.assert_outcomes(failed=2, passed=1)
    folder = pytester.path / "artifacts"
    ours = folder / "test_suite.py_test_ours"
    assert sorted(p.name for p in ours.iterdir()) == ["1-output_logits.png", "1-output_logits.pt"]
    saved = torch.load(ours / "1-output_logits.pt")
    assert saved["path"] == "output['logits']"
    assert saved["actual"][1, 2] == 1 and torch.equal(saved["expected"], torch.zeros(4, 4))
    theirs = folder / "test_suite.py_test_torch_testing"
    assert sorted(p.name for p in theirs.iterdir()) == ["1-output_b_1.png", "1-output_b_1.pt"]
    saved = torch.load(theirs / "1-output_b_1.pt")
    assert torch.equal(saved["actual"], torch.arange(6.0) * 2)
    assert torch.equal(saved["expected"], torch.arange(6.0))
    # the paths come under the failure, in a section of their own: the message is the user's
    result.stdout.fnmatch_lines(
        [
            "test_suite.py:*: TensorMismatchError",
            "*- pytest-torch-ci -*",
            "failure artifacts (heatmaps, tensors):"
            " artifacts/test_suite.py_test_ours/1-output_logits.png,"
            " artifacts/test_suite.py_test_ours/1-output_logits.pt",
            "test_suite.py:*: AssertionError",
            "*- pytest-torch-ci -*",
            "failure artifacts (heatmaps, tensors):"
            " artifacts/test_suite.py_test_torch_testing/1-output_b_1.png, *",
        ]
    )
    result.stdout.no_fnmatch_line("E *failure artifacts*")
    assert not (folder / "test_suite.py_test_passes").exists()


EXPECTED_FAILURES = """
import pytest
import torch

from pytest_torch.core.compare import TensorMismatchError, assert_close


def test_expects_a_mismatch():
    with pytest.raises(TensorMismatchError):
        assert_close(torch.ones(3), torch.zeros(3))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(torch.ones(3), torch.zeros(3))


@pytest.mark.xfail(reason="known drift")
def test_known_drift():
    assert_close(torch.ones(3), torch.zeros(3))


@pytest.mark.xfail(reason="fixed since", strict=True)
def test_fixed_since():
    with pytest.raises(TensorMismatchError):
        assert_close(torch.ones(3), torch.zeros(3))


def test_caught_then_failed():
    failures = 0
    for scale in (1.0, 2.0):
        try:
            assert_close(torch.ones(3) * scale, torch.ones(3))
        except TensorMismatchError:
            failures += 1
    assert failures == 0
"""


def test_only_failing_tests_leave_artifacts(pytester, run):
    pytester.makepyfile(test_suite=EXPECTED_FAILURES)
    result = run("--torch-failure-artifacts=arts", "-rA")
    result.assert_outcomes(passed=1, xfailed=1, failed=2)
    folder = pytester.path / "arts"
    # the passing test, the xfail and the strict xpass (its report fails, but with no
    # mismatch of its own and none it did not expect) leave nothing behind
    assert sorted(p.name for p in folder.iterdir()) == ["test_suite.py_test_caught_then_failed"]
    caught = folder / "test_suite.py_test_caught_then_failed"
    assert sorted(p.name for p in caught.iterdir()) == ["1-output.png", "1-output.pt"]
    result.stdout.fnmatch_lines(
        [
            "failure artifacts (heatmaps, tensors) of mismatches caught earlier in the test:"
            " arts/test_suite.py_test_caught_then_failed/1-output.png, *"
        ]
    )


def test_a_passing_run_leaves_no_folder(pytester, run):
    pytester.makepyfile(test_suite=EXPECTED_FAILURES)
    run("--torch-failure-artifacts=arts", "-k", "expects or known").assert_outcomes(
        passed=1, xfailed=1
    )
    assert not (pytester.path / "arts").exists()


def test_runxfail_makes_an_xfail_a_failure_with_artifacts(pytester, run):
    pytester.makepyfile(test_suite=EXPECTED_FAILURES)
    result = run("--torch-failure-artifacts=arts", "--runxfail", "-k", "known_drift")
    result.assert_outcomes(failed=1)
    pictures = [p.name for p in (pytester.path / "arts").glob("*/*.png")]
    assert pictures == ["1-output.png"]


def test_nothing_is_written_without_the_option(pytester, run):
    pytester.makepyfile(test_suite=SUITE)
    run().assert_outcomes(failed=2, passed=1)
    assert not (pytester.path / "artifacts").exists()
    result = run()
    result.stdout.no_fnmatch_line("*failure artifacts*")


def test_ini_twin_and_shape_mismatches_keep_the_tensors(pytester, run):
    pytester.makeini("[pytest]\ntorch_failure_artifacts = out\n")
    pytester.makepyfile(
        """
        import torch

        def test_shape():
            torch.testing.assert_close(torch.zeros(2, 3), torch.zeros(3, 2))
        """
    )
    result = run()
    result.assert_outcomes(failed=1)
    # torch reports a shape mismatch as a failed leaf too: the tensors are kept, no picture
    folder = pytester.path / "out" / f"{pytester.path.name.removesuffix('0')}.py_test_shape"
    assert sorted(p.name for p in folder.iterdir()) == ["1-output.pt"]


def test_an_unusable_folder_is_named_with_where_it_was_set(pytester, run):
    (pytester.path / "blocker").write_text("a file")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run("--torch-failure-artifacts=blocker")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-failure-artifacts: cannot save failure artifacts in*"])
    pytester.makeini("[pytest]\ntorch_failure_artifacts = blocker\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*torch_failure_artifacts (in tox.ini): cannot save failure artifacts in*blocker*"]
    )


def test_workers_write_artifacts_under_xdist(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.parametrize("i", range(4))
        def test_fails(i):
            torch.testing.assert_close(torch.full((3, 3), float(i)), torch.zeros(3, 3))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_ci", "-n", "2", "--torch-failure-artifacts=arts"
    )
    result.assert_outcomes(failed=3, passed=1)
    pictures = sorted(p.parent.name for p in (pytester.path / "arts").glob("*/*.png"))
    assert pictures == [
        f"test_workers_write_artifacts_under_xdist.py_test_fails_{i}" for i in (1, 2, 3)
    ]


@pytest.mark.accelerator
def test_artifacts_of_accelerator_tensors_load_on_a_machine_without_one(pytester, run, accelerator):
    """A mismatch between accelerator tensors (bfloat16 too): the heatmap is drawn and
    the saved tensors are on the CPU, so a reviewer opens them anywhere."""
    pytester.makepyfile(
        test_suite=f"""
        import torch
        from pytest_torch.core.compare import assert_close

        def test_cuda():
            expected = torch.zeros(8, 8, device="{accelerator}", dtype=torch.bfloat16)
            actual = expected.clone()
            actual[3, 4] = 2.0
            assert_close({{"logits": actual}}, {{"logits": expected}})

        def test_cuda_torch_testing():
            expected = torch.zeros(5, device="{accelerator}")
            torch.testing.assert_close(expected + 1, expected)
        """
    )
    result = run("--torch-failure-artifacts=artifacts")
    result.assert_outcomes(failed=2)
    folder = pytester.path / "artifacts" / "test_suite.py_test_cuda"
    assert sorted(p.name for p in folder.iterdir()) == ["1-output_logits.png", "1-output_logits.pt"]
    saved = torch.load(folder / "1-output_logits.pt")  # saved from the CPU: loads anywhere
    assert saved["actual"].device.type == "cpu" and saved["actual"].dtype == torch.bfloat16
    assert saved["actual"][3, 4] == 2
    theirs = pytester.path / "artifacts" / "test_suite.py_test_cuda_torch_testing"
    assert sorted(p.name for p in theirs.iterdir()) == ["1-output.png", "1-output.pt"]
