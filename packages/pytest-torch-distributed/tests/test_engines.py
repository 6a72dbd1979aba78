"""The engines without processes: reading stacks, naming exits, planning a test,
merging the ranks' reports."""

from __future__ import annotations

import signal

import pytest

from pytest_torch.distributed.plan import Arguments, make_plan, read_arguments
from pytest_torch.distributed.pool import RankRun, RankState
from pytest_torch.distributed.processes import describe_exit
from pytest_torch.distributed.protocol import Phase
from pytest_torch.distributed.reports import merged_reports
from pytest_torch.distributed.stacks import (
    collective,
    crash_report,
    main_stack,
    parse_dump,
    shown_stack,
)

MAIN, WATCHER = 0x7F0000000001, 0x7F0000000002
DUMP = """\
Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/site/pytest_torch/distributed/processes.py", line 40 in watch

Current thread 0x00007f0000000001 (most recent call first):
  File "/site/torch/distributed/distributed_c10d.py", line 3245 in all_reduce
  File "/site/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/work/tests/test_sum.py", line 12 in test_sum
  File "/site/_pytest/python.py", line 157 in pytest_pyfunc_call
  File "<string>", line 1 in <module>
"""


def test_a_dump_is_read_outermost_first_and_names_the_collective() -> None:
    threads = parse_dump(DUMP)
    assert set(threads) == {MAIN, WATCHER, 0}  # 0: the thread that wrote the dump
    frames = main_stack(DUMP, main_thread=MAIN)
    assert [f.func for f in frames] == [
        "<module>",
        "pytest_pyfunc_call",
        "test_sum",
        "wrapper",
        "all_reduce",
    ]
    assert collective(frames) == "all_reduce, called at /work/tests/test_sum.py:12 in test_sum"
    assert shown_stack(frames) == [
        "  /work/tests/test_sum.py:12 in test_sum",
        "  /site/torch/distributed/c10d_logger.py:83 in wrapper",
        "  /site/torch/distributed/distributed_c10d.py:3245 in all_reduce",
    ]
    assert collective(main_stack(DUMP, main_thread=WATCHER)) is None


def test_a_native_crash_in_a_log_is_found() -> None:
    log = "noise\nFatal Python error: Segmentation fault\n\n" + DUMP
    assert crash_report(log)[:3] == [
        "Fatal Python error: Segmentation fault",
        "its Python stack (most recent call last):",
        "  /work/tests/test_sum.py:12 in test_sum",
    ]
    assert crash_report("a rank that exited quietly") == []


def test_a_crash_in_a_native_thread_shows_the_main_thread() -> None:
    # an abort in a C++ library's own thread: faulthandler marks no "Current thread"
    log = "Fatal Python error: Aborted\n\n" + DUMP.replace("Current thread", "Thread")
    assert crash_report(log, main_thread=MAIN)[:3] == [
        "Fatal Python error: Aborted",
        "it crashed in a native thread; its main thread was here (most recent call last):",
        "  /work/tests/test_sum.py:12 in test_sum",
    ]


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (7, "exited with code 7"),
        (3, "exited with code 3"),  # a test's own os._exit(3)
        (
            -signal.SIGKILL,
            "was killed by SIGKILL — the kernel's out-of-memory killer is the"
            " usual cause (see dmesg)",
        ),
        (-signal.SIGSEGV, "was killed by SIGSEGV — a crash in native code"),
        (-signal.SIGTERM, "was killed by SIGTERM"),
    ],
)
def test_exits_are_named(code: int, text: str) -> None:
    assert describe_exit(code) == text


def test_pytest_own_statuses_are_named_where_the_log_shows_them() -> None:
    log = "INTERNALERROR> Traceback (most recent call last):"
    assert describe_exit(3, log=log) == (
        "exited with code 3 (pytest's status for an internal error in the rank's session)"
    )
    assert describe_exit(2, log="KeyboardInterrupt") == (
        "exited with code 2 (pytest's status for an interrupted session: a KeyboardInterrupt)"
    )


def test_a_test_without_accelerators_plans_cpu_ranks() -> None:
    plan = make_plan(Arguments(2, None, None, None, False), None, 60.0, "t")
    assert (plan.backend, plan.devices, plan.timeout, plan.skip) == (
        "gloo",
        ("cpu", "cpu"),
        60.0,
        None,
    )
    assert plan.describe() == "2 ranks, gloo on cpu"
    marked = make_plan(Arguments(3, None, 5.0, ("cpu",), False), None, 60.0, "t")
    assert (marked.world_size, marked.timeout) == (3, 5.0)


def test_an_accelerator_gets_gloo_beside_its_own_backend() -> None:
    from pytest_torch.distributed.plan import default_backend

    assert default_backend("cpu") == "gloo"
    assert default_backend("cuda") == "cpu:gloo,cuda:nccl"
    assert default_backend("xpu") == "cpu:gloo,xpu:xccl"


def test_marker_arguments_by_position_and_keyword() -> None:
    assert read_arguments((2,), {}, "t").world_size == 2
    assert read_arguments((), {"world_size": 4, "device": ("cuda", "cpu")}, "t").device == (
        "cuda",
        "cpu",
    )
    with pytest.raises(ValueError, match="world_size must be a whole number"):
        read_arguments((True,), {}, "t")


def _phase(rank: int, when: str, outcome: str, longrepr: object = None) -> Phase:
    report = {
        "$report_type": "TestReport",
        "nodeid": "t.py::test",
        "location": ("t.py", 0, "test"),
        "keywords": {},
        "outcome": outcome,
        "longrepr": longrepr,
        "when": when,
        "sections": [],
        "duration": 0.1 * (rank + 1),
        "start": 1.0,
        "stop": 2.0,
        "user_properties": [],
    }
    return Phase(1, rank, when, outcome, report)


@pytest.fixture
def item(pytester: pytest.Pytester) -> pytest.Item:
    return pytester.getitem("def test_func(): pass")


def _run(*ranks: list[Phase], ending: str = "done") -> RankRun:
    states = [RankState(r, phases=list(p), done=ending == "done") for r, p in enumerate(ranks)]
    return RankRun("t.py::test", states, ending=ending)


def test_all_ranks_passing_is_one_passed_result(item: pytest.Item) -> None:
    phases = [_phase(0, w, "passed") for w in ("setup", "call", "teardown")]
    others = [_phase(1, w, "passed") for w in ("setup", "call", "teardown")]
    reports = merged_reports(item.config, item, _run(phases, others))
    assert [(r.when, r.outcome) for r in reports] == [
        ("setup", "passed"),
        ("call", "passed"),
        ("teardown", "passed"),
    ]
    assert reports[1].duration == pytest.approx(0.2)  # the slowest rank's


def test_one_failing_rank_fails_the_test_and_is_named(item: pytest.Item) -> None:
    zero = [
        _phase(0, "setup", "passed"),
        _phase(0, "call", "passed"),
        _phase(0, "teardown", "passed"),
    ]
    one = [
        _phase(1, "setup", "passed"),
        _phase(1, "call", "failed", "E   AssertionError: off by one"),
        _phase(1, "teardown", "passed"),
    ]
    reports = merged_reports(item.config, item, _run(zero, one))
    call = reports[1]
    assert call.outcome == "failed"
    text = str(call.longrepr)
    assert text.startswith("rank 1 of 2 failed: AssertionError: off by one; rank 0 passed it")
    assert "AssertionError: off by one" in text
    assert "rank 0 finished the test: passed" in text


def test_a_hung_rank_fails_the_phase_it_was_in(item: pytest.Item) -> None:
    zero = [_phase(0, "setup", "passed")]
    one = [
        _phase(1, "setup", "passed"),
        _phase(1, "call", "passed"),
        _phase(1, "teardown", "passed"),
    ]
    run = _run(zero, one, ending="timeout")
    run.ranks[1].done = True
    run.waited_s = 3.0
    reports = merged_reports(item.config, item, run)
    assert [(r.when, r.outcome) for r in reports] == [("setup", "passed"), ("call", "failed")]
    # --durations and JUnit's time: until the ranks were stopped, not rank 1's 0.2 s
    assert reports[1].duration == pytest.approx(3.0 - 0.2)  # less the slowest setup
    assert str(reports[1].longrepr).startswith(
        "timed out after 3 s: rank 0 of 2 did not finish call (rank 0 busy after setup)"
    )


def test_a_collective_the_others_never_joined_is_named_in_the_summary(
    item: pytest.Item,
) -> None:
    # rank 1 skipped an all_reduce and finished: rank 0's collective broke when rank 1
    # closed its process group
    gone = "E   RuntimeError: [../gloo/transport/tcp/pair.cc:537] Connection closed by peer"
    zero = [_phase(0, "setup", "passed"), _phase(0, "call", "failed", gone)]
    one = [_phase(1, w, "passed") for w in ("setup", "call", "teardown")]
    reports = merged_reports(item.config, item, _run(zero, one))
    call = reports[1]
    assert str(call.longrepr).startswith(
        "rank 0 of 2 failed in a collective that rank 1 never joined (rank 1 finished the test"
        " meanwhile)"
    )
    assert "rank 1 passed it" not in str(call.longrepr).splitlines()[0]
    summary = call.longrepr.chain[-1][1].message  # what -rA and JUnit's message show
    assert summary.startswith("rank 0 of 2 failed in a collective that rank 1 never joined (")
