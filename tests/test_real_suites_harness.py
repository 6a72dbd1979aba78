"""benchmarks/real_suites.py: what it reads from JUnit XML and from a run's output, the
node ids it rebuilds, the job summary and annotation checks, and when it reruns; with
hand-written files and a fake runner, never a real suite."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location(
        "real_suites", REPO / "benchmarks" / "real_suites.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


rs = _load()

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="5">
<testcase classname="tests.test_ops" name="test_ok[a.b-1]" time="0.1"/>
<testcase classname="tests.test_ops.TestThing" name="test_fails" time="0.1">
  <failure message="Failed: memory leak: each of the 3 runs after the warm-up left more behind.">
details</failure></testcase>
<testcase classname="tests.test_ops" name="test_teardown" time="0.1">
  <error message="failed on teardown with &quot;RuntimeError: boom&quot;">trace</error></testcase>
<testcase classname="tests.test_ops" name="test_skip" time="0.0">
  <skipped type="pytest.skip" message="no GPU">skip</skipped></testcase>
<testcase classname="tests.test_ops" name="test_xfail" time="0.0">
  <skipped type="pytest.xfail" message="known"/></testcase>
</testsuite></testsuites>
"""


def test_outcomes_and_messages_from_junit(tmp_path):
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    outcomes, messages = rs.outcomes_of(junit)
    assert outcomes == {
        "tests.test_ops::test_ok[a.b-1]": "passed",
        "tests.test_ops.TestThing::test_fails": "failed",
        "tests.test_ops::test_teardown": "error",
        "tests.test_ops::test_skip": "skipped",
        "tests.test_ops::test_xfail": "xfailed",
    }
    assert messages["tests.test_ops.TestThing::test_fails"].startswith("Failed: memory leak: ")
    assert rs.outcomes_of(tmp_path / "absent.xml") == ({}, {})


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


def test_node_ids_of_functions_unittest_methods_and_nested_classes(tmp_path):
    _touch(tmp_path / "tests" / "__init__.py")
    _touch(tmp_path / "tests" / "test_ops.py")
    _touch(tmp_path / "tests" / "api_tests.py")  # named outside pytest's pattern: given
    assert rs.node_id(tmp_path, "tests.test_ops::test_x[1.5-a]", ["tests"]) == (
        "tests/test_ops.py::test_x[1.5-a]"
    )
    # a unittest.TestCase method: JUnit's classname is module.Class
    test = "tests.api_tests.TestState::test_forward"
    assert rs.node_id(tmp_path, test, ["tests/api_tests.py"]) == (
        "tests/api_tests.py::TestState::test_forward"
    )
    assert rs.node_id(tmp_path, "tests.test_ops.TestA.TestB::test_y", []) == (
        "tests/test_ops.py::TestA::TestB::test_y"
    )
    assert rs.node_id(tmp_path, "tests.test_gone::test_z", []) is None


def test_node_ids_prefer_the_whole_module_path_to_a_module_on_the_way(tmp_path):
    """einops keeps its tests in its package, beside einops/einops.py."""
    _touch(tmp_path / "pyproject.toml")
    _touch(tmp_path / "einops" / "__init__.py")
    _touch(tmp_path / "einops" / "einops.py")
    _touch(tmp_path / "einops" / "tests" / "__init__.py")
    _touch(tmp_path / "einops" / "tests" / "test_ops.py")
    for tests in (["einops/tests"], ["einops/tests/test_ops.py::test_x"], []):
        assert rs.node_id(tmp_path, "einops.tests.test_ops::test_x", tests) == (
            "einops/tests/test_ops.py::test_x"
        )


def test_node_ids_under_a_rootdir_below_the_suite(tmp_path):
    """The suite's own pytest.ini in a subfolder makes that the rootdir: JUnit names the
    file from there, the node id is from the suite's folder, where the runs start."""
    _touch(tmp_path / "sub" / "pytest.ini")
    _touch(tmp_path / "sub" / "tests" / "test_a.py")
    test = "tests.test_a.TestX::test_b"
    assert rs.node_id(tmp_path, test, ["sub/tests"]) == "sub/tests/test_a.py::TestX::test_b"
    assert rs.node_id(tmp_path, test, ["sub/tests/test_a.py::TestX::test_b"]) == (
        "sub/tests/test_a.py::TestX::test_b"
    )


def test_node_ids_under_a_rootdir_above_the_suite(tmp_path):
    """A suite started in a subfolder of a project whose pyproject.toml is the rootdir."""
    _touch(tmp_path / "pyproject.toml")
    _touch(tmp_path / "pkg" / "tests" / "test_a.py")
    assert rs.node_id(tmp_path / "pkg", "pkg.tests.test_a::test_b", ["tests"]) == (
        "tests/test_a.py::test_b"
    )


OUTPUT = """\
torch: devices cpu (--torch-device), base seed 0 (--torch-seed)
torch: deterministic algorithms for tests using torch_seed
..........s.......F.                                                     [ 50%]
torch: printed by a test, before the end
...................x                                                     [100%]
=================================== FAILURES ===================================
________________________________ test_broken ___________________________________
E   AssertionError
------------------------ torch: what the checks reached ------------------------
torch: --torch-leak-check checked 36 of 40 tests; 4 not checked:
  4 tests: async test bodies (test_io.py::test_fetch, ... and 1 more)
torch: --torch-deterministic applied to none of the 40 tests: it acts on tests that use torch_seed
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
1 failed, 37 passed, 1 skipped, 1 xfailed, 2 warnings in 12.34s
"""


def test_end_lines_are_those_after_the_progress_with_their_continuations():
    lines = rs.end_lines(OUTPUT)
    assert lines == [
        "torch: --torch-leak-check checked 36 of 40 tests; 4 not checked:",
        "  4 tests: async test bodies (test_io.py::test_fetch, ... and 1 more)",
        "torch: --torch-deterministic applied to none of the 40 tests: it acts on tests that use torch_seed",
    ]
    assert rs.acted_on_none(lines)
    assert not rs.acted_on_none(lines[:2])
    assert not rs.acted_on_none(["torch: --torch-leak-check checked all 40 tests"])
    assert rs.end_lines("") == []


def test_end_lines_under_xdist_in_verbose_mode():
    """A suite's addopts may say -v: the header is printed, and xdist's progress lines
    start with the worker."""
    output = (
        "torch: devices cpu (--torch-device), base seed 0 (--torch-seed)\n"
        "created: 2/2 workers\n"
        "[gw1] [ 50%] PASSED tests/test_a.py::test_b\n"
        "[gw0] [100%] PASSED tests/test_a.py::test_c\n"
        "torch: --torch-leak-check checked all 2 tests\n"
        "2 passed in 3.00s\n"
    )
    assert rs.end_lines(output) == ["torch: --torch-leak-check checked all 2 tests"]


def test_pytest_final_counts():
    assert rs.final_line(OUTPUT) == "1 failed, 37 passed, 1 skipped, 1 xfailed, 2 warnings"
    assert rs.final_line("...\n= 3 passed in 61.20s (0:01:01) =\n") == "3 passed"
    assert rs.final_line("no tests ran in 0.01s\n") == "no tests ran"
    assert rs.final_line("nothing like it\n") is None
    coloured = (
        "\x1b[32m===== \x1b[32m\x1b[1m3 passed\x1b[0m\x1b[32m in 1.20s\x1b[0m\x1b[32m =====\x1b[0m"
    )
    assert rs.final_line(rs.COLOUR.sub("", coloured)) == "3 passed"
    assert rs.counts_of("2 failed, 1360 passed, 1 error, 3 warnings, 228 subtests passed") == {
        "failed": 2, "passed": 1360, "error": 1, "warning": 3, "subtests passed": 228,
    }  # fmt: skip
    assert rs.counts_of("2 errors, 1 warning") == {"error": 2, "warning": 1}
    assert rs.counts_of("no tests ran") == {}


@pytest.mark.parametrize(
    ("heading", "agrees"),
    [
        ("1 failed, 37 passed, 1 skipped, 1 xfailed, 2 warnings", True),
        ("37 passed, 1 failed, 2 warnings, 1 skipped, 1 xfailed", True),  # order aside
        ("no failures: 1 failed, 37 passed, 1 skipped, 1 xfailed, 2 warnings", False),
        ("1 failed, 37 passed, 1 skipped, 1 xfailed", False),  # the warnings left out
        ("1 failed, 38 passed, 1 skipped, 1 xfailed, 2 warnings", False),
    ],
)
def test_job_summary_heading_against_pytest_counts(tmp_path, heading, agrees):
    summary = tmp_path / "summary.md"
    summary.write_text(f"## pytest-torch: {heading}\n\n| test | where | failure |\n")
    ok, said = rs.summary_check(summary, OUTPUT)
    assert ok is agrees, said
    assert said.startswith("agrees" if agrees else "DISAGREES")


def test_job_summary_with_no_failures_missing_or_doubled(tmp_path):
    summary = tmp_path / "summary.md"
    assert rs.summary_check(summary, OUTPUT) == (
        False, "NO JOB SUMMARY: summary.md was not written"
    )  # fmt: skip
    summary.write_text("## pytest-torch: no failures: 5 passed\n")
    assert rs.summary_check(summary, "5 passed in 1.00s\n")[0]
    summary.write_text("## pytest-torch: 5 passed\n")  # "no failures" left out
    assert not rs.summary_check(summary, "5 passed in 1.00s\n")[0]
    summary.write_text("## pytest-torch: no failures: 5 passed\n" * 2)
    assert "2 '## pytest-torch:' headings" in rs.summary_check(summary, "5 passed in 1s\n")[1]


def test_annotations_name_every_failed_test():
    output = (
        "::error file=tests/test_ops.py,line=12,title=TestThing%3A%3Atest_fails: memory leak::"
        "memory leak: each of%0Athe runs\n"
        "::error file=tests/test_ops.py,line=30,title=test_teardown (error in teardown)::boom\n"
        "::error file=tests/test_ops.py,line=40,title=test_x[a%2Cb] failed::assert 1 == 2\n"
    )
    assert rs.annotations(output)[0] == (
        "TestThing::test_fails: memory leak", "memory leak: each of\nthe runs"
    )  # fmt: skip
    failed = {
        "a::test_fails": "TestThing::test_fails",
        "a::test_teardown": "test_teardown",
        "a::test_x[a,b]": "test_x[a,b]",
    }
    ok, said = rs.annotation_check(failed, output)
    assert ok, said
    assert said == "3 tests failed: 3 annotated one by one"
    ok, said = rs.annotation_check({**failed, "a::test_x": "test_x"}, output)  # a prefix only
    assert not ok
    assert said.startswith("MISSING: 1 of the 4 tests that failed have no ::error line: a::test_x")
    assert rs.annotation_check({}, "") == (True, "no failed test in the JUnit file")


def test_annotations_beyond_the_cap_are_counted_in_the_last_one():
    failed = {f"m::test_{i}": f"test_{i}" for i in range(14)}
    own = "".join(f"::error file=t.py,line=1,title=test_{i} failed::x\n" for i in range(9))
    last = "::error title=5 more failed tests::GitHub shows 10 annotations per step; ...\n"
    ok, said = rs.annotation_check(failed, own + last)
    assert ok, said
    assert said == (
        "14 tests failed: 9 annotated one by one, 5 counted in the last one ('5 more failed tests')"
    )
    ok, said = rs.annotation_check(failed, own)
    assert not ok
    assert said.startswith("MISSING: 5 of the 14 tests")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Failed: memory leak: each of the 3 runs after the warm-up left more behind.",
         "the family's verdict: memory leak (--torch-leak-check)"),
        ("Failed: peak memory on cpu was 12.0 MiB, over the torch_max_memory budget of 8 MiB",
         "the family's verdict: memory budget"),
        ("Failed: latency budget exceeded: median 3.1 ms > budget 2 ms (+55.0 %)",
         "the family's verdict: latency budget"),
        ("AssertionError: not deterministic: run 2 of 3 differs from run 1",
         "the family's verdict: not deterministic"),
        ("RuntimeError: index_add_ does not have a deterministic implementation\n"
         "----------------- torch-deterministic -----------------\n--torch-deterministic ...",
         "explained in torch-deterministic"),
        ("AssertionError: assert 1 == 2\nwhich mentions a memory leak: but not as ours", None),
        ("AssertionError: Tensor-likes are not close!", None),
    ],
)  # fmt: skip
def test_which_failures_the_family_explains(message, expected):
    assert rs.explanation(message) == expected


class FakeRunner:
    """Answers runs from ``answer(mode, tests, number)`` -> {JUnit id: outcome}."""

    def __init__(self, suite, answer):
        self.suite, self.answer, self.started = suite, answer, []
        self._numbers = Counter()

    def numbered(self, base):
        self._numbers[base] += 1
        return f"{base}-{self._numbers[base]}"

    def run(self, mode, tests, stem):
        self.started.append((stem, mode, list(tests)))
        outcomes = self.answer(mode, list(tests), len(self.started))
        return rs.Run(stem, mode, list(tests), [], outcomes, {}, "", 0, 1.0, 1.0)


def _table_run(mode, outcomes, messages=None):
    return rs.Run(mode, mode, ["tests"], [], outcomes, messages or {}, "", 0, 1.0, 1.0)


@pytest.fixture
def suite(tmp_path):
    _touch(tmp_path / "tests" / "test_a.py")
    return tmp_path


def test_recheck_reruns_the_differing_tests_together_then_alone_and_stops_early(suite):
    ids = ["tests.test_a::test_flaky", "tests.test_a::test_ours", "tests.test_a::test_same"]
    runs = {
        "plain": _table_run("plain", dict.fromkeys(ids, "passed")),
        "leak": _table_run("leak", {ids[0]: "failed", ids[1]: "failed", ids[2]: "passed"},
                           {ids[0]: "AssertionError", ids[1]: "AssertionError"}),
    }  # fmt: skip

    def answer(mode, tests, number):
        if len(tests) > 1:  # the plain reruns, together: test_flaky fails in the second
            return {ids[0]: "failed" if number == 2 else "passed", ids[1]: "passed"}
        return {ids[1]: "failed" if mode == "leak" else "passed"}  # alone: only test_ours

    runner = FakeRunner(suite, answer)
    recheck = rs.Recheck(runner, runs, times=4, jobs=1)
    recheck(rs.differences_of(["plain", "leak"], runs))
    assert runner.started[:2] == [
        ("plain-rerun-1", "plain", ["tests/test_a.py::test_flaky", "tests/test_a.py::test_ours"]),
        ("plain-rerun-2", "plain", ["tests/test_a.py::test_flaky", "tests/test_a.py::test_ours"]),
    ]
    # test_flaky is flaky plain: never run alone; test_ours: 4 plain runs, 1 under leak
    assert [(stem, mode) for stem, mode, _ in runner.started[2:]] == [
        ("alone-plain-1", "plain"), ("alone-plain-2", "plain"), ("alone-plain-3", "plain"),
        ("alone-plain-4", "plain"), ("alone-leak-1", "leak"),
    ]  # fmt: skip
    assert recheck.flaky == {
        ids[0]: "the plain run, then 2 reruns of the differing tests: passed, passed, failed"
    }
    assert recheck.said["leak", ids[1]] == "alone, plain: 4 passed of 4; leak: 1 failed of 1"


def test_recheck_leaves_plain_alone_for_the_familys_verdict(suite):
    test = "tests.test_a::test_leaks"
    runs = {
        "plain": _table_run("plain", {test: "passed"}),
        "leak": _table_run("leak", {test: "failed"}, {test: "Failed: memory leak: each of ..."}),
    }
    runner = FakeRunner(suite, lambda mode, tests, number: {test: "passed"})
    recheck = rs.Recheck(runner, runs, times=3, jobs=2)
    recheck(rs.differences_of(["plain", "leak"], runs))
    assert [mode for _, mode, _ in runner.started] == ["leak"] * 3  # never plain
    assert recheck.said["leak", test] == (
        "alone, no plain run (the family's verdict); leak: 3 passed of 3"
    )
    assert not recheck.flaky


def test_a_plain_run_alone_that_gives_the_modes_outcome_makes_it_flaky(suite):
    test = "tests.test_a::test_random"
    runs = {
        "plain": _table_run("plain", {test: "passed"}),
        "autoload": _table_run("autoload", {test: "failed"}, {test: "AssertionError"}),
        "leak": _table_run("leak", {test: "failed"}, {test: "AssertionError"}),
    }

    def answer(mode, tests, number):
        if len(runner.started) <= 2:
            return {test: "passed"}  # the plain reruns agree with the plain run
        return {test: "failed" if number == 4 else "passed"}  # the second alone run fails

    runner = FakeRunner(suite, answer)
    recheck = rs.Recheck(runner, runs, times=10, jobs=1)
    recheck(rs.differences_of(["plain", "autoload", "leak"], runs))
    assert [stem for stem, _, _ in runner.started] == [
        "plain-rerun-1", "plain-rerun-2", "alone-plain-1", "alone-plain-2",
    ]  # fmt: skip
    assert recheck.flaky == {test: "a plain run of its own gave failed"}
    assert recheck.said["autoload", test] == "alone, plain: 1 passed, 1 failed of 2"
    assert recheck.said["leak", test] == "a plain run of its own gave failed"


def test_execute_keeps_each_runs_output_and_exit_status(tmp_path):
    log = tmp_path / "run.out"
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    status, wall, cpu = rs.execute([sys.executable, "-c", code], tmp_path, {}, log)
    assert status == 3
    assert wall >= 0 and cpu >= 0
    assert sorted(log.read_text().split()) == ["err", "out"]


def test_runner_names_reruns_apart_from_the_tables_runs(tmp_path):
    runner = rs.Runner(sys.executable, tmp_path, tmp_path)
    assert [runner.numbered("plain-rerun") for _ in range(2)] == ["plain-rerun-1", "plain-rerun-2"]
    assert runner.numbered("alone-leak") == "alone-leak-1"
    assert (tmp_path / f"{rs.SEED_MODULE}.py").read_text() == rs.SEED_PLUGIN
    assert "def _pytest_torch_seed_every_test(torch_seed):" in rs.SEED_PLUGIN
