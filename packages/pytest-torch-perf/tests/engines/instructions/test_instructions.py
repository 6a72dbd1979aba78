"""The instruction-count engine without Valgrind: reading Callgrind's files (recorded
ones, made by ``data/make_callgrind_outputs.py``), the comparison and its attribution,
the baseline file's instruction section, and client requests run natively."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pytest_torch.perf.baselines import BaselineFile, BaselineFileError
from pytest_torch.perf.engines.instructions import callgrind_output, client_requests, valgrind
from pytest_torch.perf.engines.instructions.callgrind_output import (
    NO_SYMBOL,
    CallgrindOutputError,
    describe_function,
    function_key,
    grew_most,
    parse,
    top_functions,
)
from pytest_torch.perf.engines.instructions.counting import Counted, parse_key, typical
from pytest_torch.perf.engines.instructions.entry import InstructionBaseline
from pytest_torch.perf.engines.instructions.judging import (
    attribution,
    compare,
    missing,
    new_baseline,
    record,
)

DATA = Path(__file__).parent / "data"
KEY = "torch=2.13.0+cpu python=3.11.7 valgrind=3.19.0 cpu=x86_64/AVX2"


def _recorded(calls: int) -> callgrind_output.Dump:
    with gzip.open(DATA / f"mlp-{calls}-calls.callgrind.gz", "rt") as handle:
        return parse(handle.read())


def _counted(dump: callgrind_output.Dump, extra: int = 0) -> Counted:
    total = dump.instructions + extra
    return Counted(total, [total, total + 40, total + 900], 2, top_functions(dump.functions))


def test_recorded_outputs_add_up_and_scale_with_the_work():
    ten, eleven = _recorded(10), _recorded(11)
    assert ten.trigger.endswith("mlp-10-calls")
    for dump in (ten, eleven):
        # every instruction belongs to exactly one function: calls' costs are not counted twice
        assert sum(dump.functions.values()) == dump.instructions
    # 11 calls against 10, less the fixed cost of a count: a little under 1.1x
    assert 1.09 < eleven.instructions / ten.instructions < 1.1


def test_compressed_names_calls_and_events():
    text = "\n".join(
        [
            "events: Ir",
            "summary: 160",
            "desc: Trigger: Client Request: tag",
            "ob=(1) /usr/lib/libtorch_cpu.so",
            "fn=(1) at::_ops::addmm::call(at::Tensor const&, at::Tensor const&)",
            "0 100",
            "cob=(2) /usr/lib/libpython3.11.so.1.0",
            "cfn=(2) _PyEval_EvalFrameDefault",
            "calls=3 0",
            "0 9999",  # the call's cost, the callee's own count again: left out
            "ob=(2)",
            "fn=(2)",
            "0 50",
            "fn=(3) 0x00000000049367c0",
            "+2 10",
        ]
    )
    dump = parse(text)
    assert dump.instructions == 160
    assert dump.trigger == "Client Request: tag"
    assert dump.functions == {
        "at::_ops::addmm::call (libtorch_cpu.so)": 100,
        "_PyEval_EvalFrameDefault (libpython3.11.so.1.0)": 50,
        f"{NO_SYMBOL} (libpython3.11.so.1.0)": 10,
    }
    with pytest.raises(CallgrindOutputError, match="Ir"):
        parse("events: Dr\nsummary: 3\n")


def test_the_totals_win_over_a_wrong_summary():
    # seen with Valgrind 3.19: a dump's header said 5,422,083 while its cost lines added
    # up to 11,776,717, as every other count of the same call did
    text = "events: Ir\nsummary: 5\nfn=(1) f\n0 12\n0 30\ntotals: 42\n"
    assert parse(text).instructions == 42


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "at::native::(anonymous namespace)::addmm_impl_cpu_(at::Tensor&, at::Tensor const&)",
            "at::native::(anonymous namespace)::addmm_impl_cpu_",
        ),
        (
            "void c10::function_ref<void (long, long)>::callback_fn<F>(long, long)",
            "void c10::function_ref<...>::callback_fn<...>",
        ),
        ("(below main)", "(below main)"),
        ("_int_free'2", "_int_free"),
    ],
)
def test_function_names_for_people(name, expected):
    assert function_key(name, "/x/libc.so.6") == f"{expected} (libc.so.6)"


def test_torch_ops_and_the_interpreter_are_told():
    assert describe_function("at::_ops::addmm::call (libtorch_cpu.so)").endswith("[aten::addmm]")
    assert describe_function("_PyEval_EvalFrameDefault (libpython3.11.so.1.0)").endswith(
        "[Python interpreter]"
    )
    assert describe_function("malloc (libc.so.6)") == "malloc (libc.so.6) [glibc allocator]"
    assert describe_function("memcpy (libc.so.6)") == "memcpy (libc.so.6)"


@pytest.mark.parametrize(
    ("key", "allocator"),
    [
        ("_int_malloc (libc.so.6)", True),
        ("unlink_chunk.constprop.0 (libc.so.6)", True),  # a compiler's copy of it
        ("_mid_memalign.constprop.0 (libc.so.6)", True),
        ("malloc_consolidate (libc.so.6)", True),
        ("free (libc.so.6)", True),
        ("__memcpy_avx_unaligned_erms (libc.so.6)", False),  # libc, not its allocator
        ("pthread_mutex_lock@@GLIBC_2.2.5 (libc.so.6)", False),
        ("malloc (libtorch_cpu.so)", False),  # another library's function of that name
        ("_PyObject_Malloc (libpython3.11.so.1.0)", False),  # Python's own allocator: Python's
    ],
)
def test_glibcs_allocator_is_told_by_name_and_library(key, allocator):
    assert callgrind_output.is_allocator(key) is allocator


def test_the_allocators_part_is_its_functions():
    functions = {
        "_int_malloc (libc.so.6)": 300,
        "unlink_chunk.constprop.0 (libc.so.6)": 20,
        "__memset_avx2_unaligned_erms (libc.so.6)": 500,
        "_PyEval_EvalFrameDefault (libpython3.11.so.1.0)": 7,
    }
    assert callgrind_output.allocator_instructions(functions) == 320


def test_grew_most_names_the_largest_growth_first():
    ten, eleven = _recorded(10), _recorded(11)
    before, now = top_functions(ten.functions), top_functions(eleven.functions)
    grown = grew_most(before, now)
    changes = {name: now[name] - before[name] for name in now.keys() & before.keys()}
    assert grown[0].function == max(changes, key=lambda name: changes[name])
    assert [g.change for g in grown] == sorted((g.change for g in grown), reverse=True)
    assert all(g.change > 0 for g in grown)


def test_a_function_the_baseline_did_not_keep_is_never_given_an_invented_figure():
    before = {f"f{i} (lib.so)": 1000 - i for i in range(callgrind_output.KEPT_FUNCTIONS)}
    now = {**before, "new (lib.so)": 950, "small (lib.so)": 10}
    grown = grew_most(before, now)
    # "new" may have counted up to 901 (the smallest kept) before: it grew by at least 49
    assert [g.function for g in grown] == ["new (lib.so)"]
    assert grown[0].before is None


def test_allocator_growth_the_heaps_state_explains_is_not_named():
    # the baseline's process found its heap's free lists in a lucky state; now the code
    # grew 1.7 %, and the allocator 9 % of its part, within the 10 % its state moves it by
    before = {
        "tokenize (libpython3.11.so.1.0)": 900_000,
        "_int_malloc (libc.so.6)": 60_000,
        "unlink_chunk.constprop.0 (libc.so.6)": 10_000,
    }
    now = {
        "tokenize (libpython3.11.so.1.0)": 915_000,
        "_int_malloc (libc.so.6)": 65_000,
        "unlink_chunk.constprop.0 (libc.so.6)": 11_500,
    }
    assert "_int_malloc (libc.so.6)" in [g.function for g in grew_most(before, now)]
    grown = grew_most(before, now, allocator_noise=0.1)
    assert [g.function for g in grown] == ["tokenize (libpython3.11.so.1.0)"]
    lines = "\n".join(attribution(before, now, allocator_noise=0.1))
    assert "tokenize" in lines and "_int_malloc" not in lines
    assert "glibc's allocator counted +6,500 in all (70,000 -> 76,500), within the 10 %" in lines


def test_allocator_growth_beyond_the_noise_is_named_by_its_excess():
    # the call allocates twice what it did: the allocator grew beyond any heap state
    before = {"tokenize (libpython3.11.so.1.0)": 900_000, "_int_malloc (libc.so.6)": 60_000}
    now = {"tokenize (libpython3.11.so.1.0)": 940_000, "_int_malloc (libc.so.6)": 160_000}
    grown = grew_most(before, now, allocator_noise=0.1)
    # _int_malloc grew 100,000, of which 6,000 (10 % of the allocator's part) may be
    # the heap's state: 94,000 beyond it, ranked first
    assert [g.function for g in grown] == [
        "_int_malloc (libc.so.6)",
        "tokenize (libpython3.11.so.1.0)",
    ]
    assert grown[0].change == 100_000  # the figure shown is the whole growth
    lines = "\n".join(attribution(before, now, allocator_noise=0.1))
    assert "[glibc allocator]" in lines and "allocates more, or larger, blocks" in lines


def test_each_noise_by_its_statistic_the_rests_smallest_and_the_allocators_median():
    heap = "_int_malloc (libc.so.6)"
    # (the rest: interpreter and kernels, the allocator's part) per counted call: the
    # second call found the heap in a lucky state, the last one tidied it
    calls = [(1_000_300, 40_000), (1_000_250, 28_000), (1_000_100, 41_000),
             (1_003_000, 40_500), (1_000_200, 90_000)]  # fmt: skip
    dumps = [
        callgrind_output.Dump(str(i), rest + part, {"f (lib.so)": rest, heap: part})
        for i, (rest, part) in enumerate(calls)
    ]
    counted = typical(dumps)
    # the smallest rest (1,000,100: fewest attribute-cache collisions) plus the median
    # allocator part (40,500): neither the lucky 28,000 nor the tidying 90,000
    assert counted.instructions == 1_000_100 + 40_500
    assert counted.allocator == 40_500
    assert counted.functions == {"f (lib.so)": 1_000_100, heap: 41_000}  # that call's
    assert counted.repeats == [rest + part for rest, part in calls]
    outcome, baseline = record("t", counted, KEY)
    assert outcome.record.stat == "typical of 5"
    assert baseline.instructions == 1_040_600 and baseline.allocator == 40_500


def _counter(*counts: Counted):
    calls = []

    def count() -> Counted:
        calls.append(1)
        return counts[min(len(calls), len(counts)) - 1]

    return count, calls


def test_a_regression_is_counted_twice_and_names_the_functions_that_grew():
    ten, eleven = _recorded(10), _recorded(11)
    baseline = new_baseline(_counted(ten))
    count, calls = _counter(_counted(eleven))
    outcome = compare(
        "t::test_mlp", baseline, count, key=KEY, tolerance=0.01, slack=1000, rerecord="RERECORD"
    )
    assert outcome.status == "fail" and len(calls) == 2
    top = grew_most(baseline.functions, top_functions(eleven.functions))[0].function
    message = outcome.message
    assert "instruction count regression in t::test_mlp" in message
    assert "= 1.09" in message and "tolerance 0.01" in message and "slack 1,000" in message
    assert describe_function(top) in message
    assert "re-record with: RERECORD" in message
    assert outcome.record.verdict == "REGRESSION"
    assert outcome.record.measured == eleven.instructions
    assert outcome.record.reference == ten.instructions


def test_the_second_count_decides_when_it_is_within_the_limit():
    ten = _recorded(10)
    count, calls = _counter(_counted(ten, extra=ten.instructions // 20), _counted(ten))
    outcome = compare(
        "t", new_baseline(_counted(ten)), count, key=KEY, tolerance=0.01, slack=0, rerecord="R"
    )
    assert outcome.status == "pass" and len(calls) == 2
    assert outcome.record.verdict == "ok"


@pytest.mark.parametrize(
    ("extra", "status", "verdict"),
    [(0, "pass", "ok"), (1000, "pass", "ok"), (1001, "fail", "REGRESSION")],
)
def test_the_limit_is_baseline_times_tolerance_plus_slack(extra, status, verdict):
    baseline = InstructionBaseline(1_000_000, 0.0, 5, "then")
    now = Counted(1_010_000 + extra, [1_010_000 + extra], 2)
    count, _ = _counter(now)
    outcome = compare("t", baseline, count, key=KEY, tolerance=0.01, slack=1000, rerecord="R")
    assert (outcome.status, outcome.record.verdict) == (status, verdict)


@pytest.mark.parametrize(
    ("parts", "allowances", "margin", "text"),
    [
        (  # 400,000 of the baseline's instructions were the interpreter's: 5 % on top
            {"interpreter": 400_000},
            {"interpreter_allowance": 0.05},
            20_000,
            "limit 1,031,000 instr = baseline x (1 + tolerance 0.01) + 5 % of its 400,000"
            " instructions in the Python interpreter + slack 1,000",
        ),
        (  # 200,000 the interpreter's, 50,000 the allocator's: 5 % and 50 % of them
            {"interpreter": 200_000, "allocator": 50_000},
            {"interpreter_allowance": 0.05, "allocator_allowance": 0.5},
            35_000,
            "+ 5 % of its 200,000 instructions in the Python interpreter + 50 % of its 50,000"
            " in glibc's allocator + slack 1,000",
        ),
    ],
    ids=["interpreter", "allocator"],
)
@pytest.mark.parametrize(("over", "status"), [(0, "pass"), (1, "fail")])
def test_the_interpreters_and_allocators_parts_widen_the_limit(
    parts, allowances, margin, text, over, status
):
    baseline = InstructionBaseline(1_000_000, 0.0, 5, "then", **parts)
    # now's own parts are not used: the baseline's decide
    now = Counted(1_010_000 + 1000 + margin + over, [0], 2, interpreter=999_999, allocator=9)
    count, _ = _counter(now)
    outcome = compare(
        "t", baseline, count, key=KEY, tolerance=0.01, slack=1000, rerecord="R", **allowances
    )
    assert outcome.status == status
    if status == "fail":
        assert text in outcome.message
        assert "each the smallest rest plus the allocator's median" in outcome.message


def test_the_interpreters_part_is_its_library_or_executable():
    functions = {
        "_PyEval_EvalFrameDefault (libpython3.11.so.1.0)": 300,
        "_Py_dict_lookup (python3.12)": 20,
        "at::native::addmm_out (libtorch_cpu.so)": 500,
        "PyObject_Call (libpython3.11d.so.1.0)": 1,  # a debug build is not one we know
        "malloc (libc.so.6)": 7,
    }
    assert callgrind_output.interpreter_instructions(functions) == 320
    ten = _recorded(10)
    part = callgrind_output.interpreter_instructions(ten.functions)
    assert 0 < part < ten.instructions


def test_fewer_instructions_is_an_improvement_worth_recording():
    ten, eleven = _recorded(10), _recorded(11)
    count, _ = _counter(_counted(ten))
    outcome = compare(
        "t", new_baseline(_counted(eleven)), count, key=KEY, tolerance=0.01, slack=0, rerecord="R"
    )
    assert outcome.status == "pass"
    assert outcome.record.verdict.startswith("improved 8.")
    assert "consider re-recording with: R" in outcome.message


def test_no_count_under_this_key_names_what_differs():
    other = KEY.replace("python=3.11.7", "python=3.11.5")
    recorded = {other: InstructionBaseline(1, 0.0, 5, "then")}
    outcome = missing("t", KEY, recorded, strict=False, rerecord="R")
    assert outcome.status == "skip" and not outcome.judged
    assert "Python 3.11.5 (this run: 3.11.7)" in outcome.message
    assert "torch 2.13" not in outcome.message  # only what differs
    assert missing("t", KEY, {}, strict=True, rerecord="R").status == "fail"
    assert parse_key(KEY)["cpu"] == "x86_64/AVX2"


def test_the_baseline_file_keeps_counts_and_wall_clock_entries_apart(tmp_path):
    from pytest_torch.perf.engines.wall.entry import Baseline

    path = tmp_path / "baselines.json"
    wall = Baseline(1.0, "min", 0.01, "cpu", 1, "2.13.0", "3.11.7", "then")
    count = InstructionBaseline(
        123, 0.001, 5, "then", {"f (lib.so)": 100}, interpreter=23, allocator=7
    )
    BaselineFile(path).merge(
        {"machines": {"machine": {"t": wall}}, "instructions": {KEY: {"t": count}}}
    )
    BaselineFile(path).merge(
        {"machines": {"machine": {"u": wall}}}
    )  # a wall-clock run keeps the counts
    document = json.loads(path.read_text())
    assert set(document["machines"]["machine"]) == {"t", "u"}
    assert BaselineFile(path).entries("instructions", "t") == {KEY: count}
    assert BaselineFile(path).entries("instructions", "u") == {}
    document["instructions"][KEY]["t"]["instructions"] = "many"
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineFileError, match="malformed"):
        BaselineFile(path).entries("instructions", "t")


def test_client_requests_do_nothing_natively():
    assert client_requests.running_on_valgrind() is False
    assert client_requests.request(0x1001, default=7) == 7
    client_requests.toggle_collect()  # no effect, no crash


def test_where_counts_cannot_be_taken(monkeypatch):
    monkeypatch.setattr("sys.platform", "darwin")
    assert "not Linux" in (valgrind.unavailable() or "")
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert "x86-64 only" in (valgrind.unavailable() or "")
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setenv("PATH", "/nonexistent")
    problem = valgrind.unavailable() or ""
    assert "not installed" in problem and "apt-get install valgrind" in problem


def test_a_counting_process_holds_an_idle_thread_until_cleanup():
    import threading

    end = valgrind.threaded_from_now_on()
    (held,) = [t for t in threading.enumerate() if t.name == "pytest-torch-threaded"]
    assert held.is_alive() and held.daemon
    end()
    held.join(timeout=10)
    assert not held.is_alive()
