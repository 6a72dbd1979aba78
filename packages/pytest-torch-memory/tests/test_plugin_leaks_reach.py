"""The leak check and the memory budget wherever a test lives: unittest.TestCase
methods are checked like test functions, and a test the check cannot repeat is named at
the end of the run with why."""

from __future__ import annotations

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

UNITTEST_SUITE = """
import unittest

import pytest
import torch

KEPT = []
SET_UP = []


class TestTraining(unittest.TestCase):
    def setUp(self):
        SET_UP.append(1)
        self.x = torch.ones(4)

    def test_keeps_every_output(self):
        KEPT.append(self.x * 2)

    def test_clean(self):
        (self.x * 2).sum()

    @unittest.expectedFailure
    def test_known_leak(self):
        KEPT.append(self.x * 3)


class TestAfter(unittest.TestCase):
    def test_set_up_ran_once_per_test(self):
        assert len(SET_UP) == 3, SET_UP
"""


def test_unittest_methods_are_checked_like_test_functions(pytester, run):
    pytester.makepyfile(test_ut=UNITTEST_SUITE)
    result = run("--torch-leak-check", "-p", "no:randomly")
    result.assert_outcomes(failed=1, passed=2, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ TestTraining.test_keeps_every_output _*",
            "memory leak: each of the 5 runs after the warm-up left more behind.",
            "*created at test_ut.py:* in test_keeps_every_output(): `KEPT.append(self.x * 2)`",
            "*held by list `KEPT` in module `test_ut`",
            "*- torch memory: known leaks (tests marked xfail) -*",
            "test_ut.py::TestTraining::test_known_leak:",
            "*- torch: what the checks reached -*",
            "torch: --torch-leak-check checked all 4 test bodies that ran",
        ]
    )
    # the same body as a plain run: every test passes but the known leak's xfail
    run("-p", "no:randomly").assert_outcomes(passed=3, failed=1)


def test_the_marker_checks_a_unittest_method_and_a_bad_one_fails_it(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        import pytest
        import torch

        KEPT = []

        class TestMarked(unittest.TestCase):
            @pytest.mark.torch_memory_leak(iterations=3)
            def test_keeps(self):
                KEPT.append(torch.ones(2))

            @pytest.mark.torch_memory_leak(iterations="x")
            def test_bad_marker(self):
                pass

            def test_unmarked(self):
                KEPT.append(torch.ones(2))
        """
    )
    result = run()
    result.assert_outcomes(failed=2, passed=1)
    # unittest runs a class's methods in name order
    result.stdout.fnmatch_lines(
        [
            "*::TestMarked::test_bad_marker: @pytest.mark.torch_memory_leak iterations: expected"
            " a whole number from 2 to 1000*",
            "*each of the 3 runs after the warm-up left more behind*",
        ]
    )
    assert "During handling of the above exception" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "torch: @pytest.mark.torch_memory_leak checked 1 of the 2 test bodies that ran;"
            " not checked:",
            "  1 test: a malformed marker (the test failed, saying why)*",
        ]
    )


def test_a_later_run_that_raises_in_a_unittest_method_says_so(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        CALLS = []

        class TestCounter(unittest.TestCase):
            def test_counts(self):
                CALLS.append(1)
                self.assertEqual(len(CALLS), 1)
        """
    )
    result = run("--torch-leak-check")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: 2 != 1*",
            "*- torch-leak-check -*",
            "*Run 2 raised the error above; the first run passed.*",
            "Every run gets the same test case (setUp ran once before them)*",
            "Run it as before with: pytest *test_a_later_run_that_raises_in_a_unittest_method_says_so.py::TestCounter::test_counts (without --torch-leak-check)",
        ]
    )


def test_a_memory_budget_on_a_unittest_method_is_checked(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        import pytest
        import torch

        class TestBudget(unittest.TestCase):
            @pytest.mark.torch_max_memory(mb=1)
            def test_over(self):
                torch.ones(1 << 20)

            @pytest.mark.torch_max_memory(mb=64)
            def test_within(self):
                torch.ones(1 << 10)

            @pytest.mark.torch_max_memory(mb=-1)
            def test_bad_budget(self):
                pass
        """
    )
    result = run()
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*::TestBudget::test_bad_budget: @pytest.mark.torch_max_memory needs a positive"
            " budget in MiB, got -1*",
            "*peak memory on cpu was 4.0 MiB, over the torch_max_memory budget of 1 MiB*",
            "*::TestBudget::test_within * 64 MiB  within budget",
        ]
    )


def test_tests_the_check_cannot_repeat_are_named_at_the_end(pytester, run):
    pytester.makepyfile(
        test_async="""
        import unittest

        import torch

        KEPT = []

        class TestAsync(unittest.IsolatedAsyncioTestCase):
            async def test_fetch(self):
                KEPT.append(torch.ones(2))

        def test_plain():
            pass
        """,
        test_doc='''
        def double(x):
            """
            >>> double(2)
            4
            """
            return 2 * x
        ''',
    )
    result = run("--torch-leak-check", "--doctest-modules")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*- torch: what the checks reached -*",
            "torch: --torch-leak-check checked 1 of the 3 test bodies that ran; not checked:",
            "  1 test: no Python test body to repeat (doctests) (test_doc.py::test_doc.double)",
            "  1 test: the body is a coroutine, run by its own event loop (an async plugin,"
            " IsolatedAsyncioTestCase), which the check cannot repeat;*"
            " (test_async.py::TestAsync::test_fetch)",
        ]
    )


def test_a_run_it_could_not_act_on_at_all_says_none(pytester, run):
    pytester.makepyfile(
        """
        import unittest

        class TestAsync(unittest.IsolatedAsyncioTestCase):
            async def test_a(self):
                pass

            async def test_b(self):
                pass
        """
    )
    result = run("--torch-leak-check")
    result.stdout.fnmatch_lines(
        ["torch: --torch-leak-check checked none of the 2 test bodies that ran:", "  2 tests: *"]
    )
    assert "what the checks reached" not in run().stdout.str()  # nothing asked: nothing said


def test_the_end_of_run_lines_come_from_the_workers_under_xdist(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_ut=UNITTEST_SUITE.replace("== 3", ">= 0"))
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_memory", "-n", "2", "--torch-leak-check"
    )
    result.assert_outcomes(failed=1, passed=2, xfailed=1)
    result.stdout.fnmatch_lines(["torch: --torch-leak-check checked all 4 test bodies that ran"])


def test_subtests_of_a_repeated_body_are_counted_as_in_a_plain_run(pytester):
    pytest.importorskip("_pytest.subtests", reason="pytest reports subtests from pytest 9 on")
    pytester.makepyfile(
        """
        import unittest

        class TestGrid(unittest.TestCase):
            def test_grid(self):
                for n in range(3):
                    with self.subTest(n=n):
                        self.assertNotEqual(n, 2)

        def test_fixture(subtests):
            for n in range(3):
                with subtests.test(n=n):
                    assert n >= 0
        """
    )
    # a fresh process: pytest's count of subtests, as a user sees it
    args = ("-q", "-p", "torch_memory", "-p", "no:randomly")
    plain = pytester.runpytest_subprocess(*args).parseoutcomes()
    checked = pytester.runpytest_subprocess(*args, "--torch-leak-check").parseoutcomes()
    assert plain.get("subtests") == 5 and plain.get("failed") == 1, plain  # "5 subtests passed"
    assert checked == plain
