"""core.checks: a plugin's per-test checks, declared once each, run by hooks that
iterate them. Exercised through a toy plugin in real pytest runs."""

from __future__ import annotations

PLUGIN = """
import pytest

from pytest_torch.core.checks import Check, Checks
from pytest_torch.core.markers import MarkerSpec

CALLS = []


class Budget(Check):
    marker = MarkerSpec("toy_budget", "a toy budget", positional=("limit",))
    fixture = "toy"
    fixture_use = "add a `toy` argument"
    unittest = "a unittest.TestCase method cannot request the toy fixture"

    def validate(self, node):
        limit = self.marker.bind(self.marker.mark_on(node).args, {}, "toy")["limit"]
        if not isinstance(limit, int):
            raise ValueError(f"toy_budget needs a whole number, got {limit!r}")

    def start(self, item):
        CALLS.append(("start", "budget", item.name))
        return 0

    def finish(self, item, state, raised):
        CALLS.append(("finish", "budget", item.name, type(raised).__name__))
        return "budget failed" if "over" in item.name else None


class Watch(Check):
    marker = MarkerSpec("toy_watch", "a toy watch")

    def start(self, item):
        CALLS.append(("start", "watch", item.name))

    def finish(self, item, state, raised):
        CALLS.append(("finish", "watch", item.name, type(raised).__name__))
        return "watch failed" if "over" in item.name else None


CHECKS = Checks("toy_runner", (Watch(), Budget()))


def pytest_configure(config):
    CHECKS.configure(config)


def pytest_generate_tests(metafunc):
    CHECKS.collect(metafunc)


def pytest_collection_modifyitems(config, items):
    CHECKS.collected(config, items)


@pytest.fixture
def toy():
    return 1


def pytest_sessionfinish(session):
    print("CALLS", CALLS)
"""


def test_checks_start_and_finish_around_the_body_in_order(pytester, run):
    pytester.makeconftest(PLUGIN)
    pytester.makepyfile(
        """
        import pytest, unittest

        @pytest.mark.toy_watch
        @pytest.mark.toy_budget(3)
        def test_ok(toy):
            pass

        @pytest.mark.toy_watch
        @pytest.mark.toy_budget(3)
        def test_over(toy):
            pass

        @pytest.mark.toy_budget(3)
        def test_raises(toy):
            raise KeyError("own")

        def test_unmarked():
            pass

        class TestCase(unittest.TestCase):
            @pytest.mark.toy_budget(3)
            def test_method(self):
                pass

            @pytest.mark.toy_watch
            def test_watched(self):
                pass
        """
    )
    result = run("-s")
    result.assert_outcomes(passed=4, failed=2)
    # the first failure in declaration order is the test's; the body's own stands
    result.stdout.fnmatch_lines(["*watch failed*", "*KeyError: 'own'*"])
    calls = result.stdout.str().split("CALLS ", 1)[1]
    assert (
        "('start', 'watch', 'test_ok'), ('start', 'budget', 'test_ok'),"
        " ('finish', 'budget', 'test_ok', 'NoneType'), ('finish', 'watch', 'test_ok', 'NoneType')"
    ) in calls
    assert "('finish', 'budget', 'test_raises', 'KeyError')" in calls
    assert "test_unmarked" not in calls and "'budget', 'test_method'" not in calls
    assert "('start', 'watch', 'test_watched')" in calls  # a unittest method it can act on
    result.stdout.fnmatch_lines(
        [
            "torch: @pytest.mark.toy_budget checked 3 of the 4 test bodies that ran; not checked:",
            "  1 test: a unittest.TestCase method cannot request the toy fixture*",
        ]
    )


def test_a_malformed_marker_or_a_missing_fixture_is_a_collection_error(pytester, run):
    pytester.makeconftest(PLUGIN)
    pytester.makepyfile(
        test_bad="""
import pytest

@pytest.mark.toy_budget("three")
def test_bad(toy):
    pass
""",
        test_no_fixture="""
import pytest

@pytest.mark.toy_budget(3)
def test_no_fixture():
    pass
""",
        test_method="""
import pytest, unittest

class TestCase(unittest.TestCase):
    @pytest.mark.toy_watch
    @pytest.mark.toy_budget("three")
    def test_method(self):
        pass
""",
    )
    result = run("-s", "--continue-on-collection-errors")
    result.assert_outcomes(errors=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*toy_budget needs a whole number, got 'three'*",
            "*::test_no_fixture: @pytest.mark.toy_budget needs the toy fixture: add a `toy`*",
        ]
    )
