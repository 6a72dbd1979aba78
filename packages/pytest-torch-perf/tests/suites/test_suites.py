"""Unit tests of benchmark suites: specs, cases, preparing models, the report."""

from __future__ import annotations

import json

import pytest
import torch

from pytest_torch.perf.suites import cases as suites
from pytest_torch.perf.suites import report as suite_report
from pytest_torch.perf.suites.cases import Case, CaseResult, CaseSkipped, SuiteSpec

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def test_parse_spec_defaults_and_values():
    spec = suites.parse_spec({"batch_sizes": (1, 8)}, "t::x")
    assert spec == SuiteSpec((1, 8), ("float32",), ("eager",), {}, 0.3)
    spec = suites.parse_spec(
        {
            "batch_sizes": 4,
            "dtypes": "bfloat16",
            "modes": ("eager", "compile"),
            "compile_options": {"mode": "max-autotune"},
        },
        "t::x",
    )
    assert (spec.batch_sizes, spec.dtypes, spec.modes) == (
        (4,),
        ("bfloat16",),
        ("eager", "compile"),
    )
    assert spec.compile_options == {"mode": "max-autotune"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs batch_sizes="),
        ({"batch_sizes": (1, 0)}, "batch_sizes must be positive integers"),
        ({"batch_sizes": (1, True)}, "batch_sizes must be positive integers"),
        ({"batch_sizes": 1, "dtypes": ("float33",)}, "unknown dtype 'float33'"),
        ({"batch_sizes": 1, "dtypes": ("float32", "float32")}, "lists a name twice"),
        ({"batch_sizes": 1, "modes": ("jit",)}, "modes must be 'eager' and/or 'compile'"),
        ({"batch_sizes": 1, "compile_options": "fast"}, "compile_options must be a dict"),
        (
            {"batch_sizes": 1, "latency_tolerance": -1},
            "latency_tolerance must be a finite number >= 0",
        ),
        ({"batch_sizes": 1, "latency_tolerance": float("inf")}, "finite number >= 0, got inf"),
        ({"batch_sizes": 1, "latency_tolerance": float("nan")}, "finite number >= 0, got nan"),
        ({"batch_sizes": 1, "batch": 2}, "unknown argument(s) batch"),
    ],
)
def test_parse_spec_rejects_bad_declarations(kwargs, message):
    with pytest.raises(ValueError) as info:
        suites.parse_spec(kwargs, "t.py::test_x")
    assert str(info.value).startswith("t.py::test_x: @benchmark_suite")
    assert message in str(info.value)


def test_cases_cover_every_combination_with_readable_ids():
    spec = SuiteSpec((1, 8), ("float32", "bfloat16"), ("eager", "compile"))
    found = suites.cases(spec, ["cpu", "cuda"])
    assert len(found) == 16
    assert found[0].id == "cpu-float32-eager-b1"
    assert found[-1].id == "cuda-bfloat16-compile-b8"
    assert len({case.id for case in found}) == 16


def test_prepare_moves_casts_and_evaluates():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    inputs = (torch.randn(2, 4), torch.tensor([1, 2]))
    case = Case("cpu", "bfloat16", "eager", 2)
    prepared, args, kwargs = suites.prepare(
        (model, inputs), case, torch.device("cpu"), SuiteSpec((2,))
    )
    assert not prepared.training
    assert next(prepared.parameters()).dtype == torch.bfloat16
    assert args[0].dtype == torch.bfloat16
    assert args[1].dtype == torch.int64  # integer inputs keep their dtype
    assert kwargs == {}
    _, _, kwargs = suites.prepare(
        (model, {"input": torch.randn(1, 4)}), case, torch.device("cpu"), SuiteSpec((1,))
    )
    assert kwargs["input"].dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("built", "message"),
    [
        (torch.nn.Linear(2, 2), "must return (model, inputs)"),
        ((lambda x: x, torch.ones(1)), "must return a torch.nn.Module first"),
        ((torch.nn.Linear(2, 2), 3), "inputs is a tensor, a tuple"),
    ],
)
def test_prepare_explains_wrong_factory_results(built, message):
    with pytest.raises(TypeError) as info:
        suites.prepare(
            built, Case("cpu", "float32", "eager", 1), torch.device("cpu"), SuiteSpec((1,))
        )
    assert message in str(info.value)


class OnlyFloat32(torch.nn.Module):
    def forward(self, x):
        if x.dtype != torch.float32:
            raise RuntimeError("kernel not implemented for this dtype\nmore details")
        return x * 2


def test_first_call_turns_dtype_and_compile_failures_into_skips():
    device = torch.device("cpu")
    with pytest.raises(
        CaseSkipped,
        match=r"^bfloat16 does not run on cpu: RuntimeError: kernel not implemented for this dtype$",
    ):
        suites.first_call(
            OnlyFloat32(),
            (torch.ones(1, dtype=torch.bfloat16),),
            {},
            Case("cpu", "bfloat16", "eager", 1),
            device,
        )
    with pytest.raises(CaseSkipped, match=r"torch\.compile failed"):
        suites.first_call(
            OnlyFloat32(),
            (torch.ones(1, dtype=torch.bfloat16),),
            {},
            Case("cpu", "bfloat16", "compile", 1),
            device,
        )
    with pytest.raises(RuntimeError):  # eager float32 is the reference: a real failure
        suites.first_call(
            torch.nn.Sequential(torch.nn.Linear(3, 3)),
            (torch.ones(1, 2),),
            {},
            Case("cpu", "float32", "eager", 1),
            device,
        )
    assert (
        suites.first_call(
            OnlyFloat32(), (torch.ones(1),), {}, Case("cpu", "float32", "eager", 1), device
        )
        > 0
    )


def test_unknown_compile_backend_is_a_skip():
    case = Case("cpu", "float32", "compile", 1)
    spec = SuiteSpec((1,), modes=("compile",), compile_options={"backend": "no_such_backend"})
    with pytest.raises(CaseSkipped, match=r"torch\.compile is unavailable"):
        suites.prepare((torch.nn.Linear(1, 1), torch.ones(1, 1)), case, torch.device("cpu"), spec)


def result(dtype, mode, batch, median, **extra):
    order = [
        ("float32", "bfloat16").index(dtype),
        ("eager", "compile").index(mode),
        (1, 8).index(batch),
    ]
    r = CaseResult(
        "t.py::test_m",
        f"t.py::test_m[cpu-{dtype}-{mode}-b{batch}]",
        "cpu",
        dtype,
        mode,
        batch,
        order=order,
        **extra,
    )
    if median is not None:
        r.median_ms, r.throughput = median, batch / (median / 1e3)
    return r


def test_report_table_has_rows_per_batch_columns_per_dtype_and_mode():
    results = [
        result("bfloat16", "eager", 1, 2.0),
        result(
            "float32",
            "compile",
            8,
            1.0,
            first_call_ms=1500.0,
            change_pct=5.0,
            verdict="ok",
            baseline_ms=0.95,
        ),
        result(
            "float32", "eager", 1, 1.0, change_pct=-40.0, verdict="improved 40 %", baseline_ms=1.6
        ),
        result("float32", "eager", 8, 4.0),
        result("float32", "compile", 1, 0.5, first_call_ms=2000.0),
        result(
            "bfloat16",
            "eager",
            8,
            None,
            status="skipped",
            reason="bfloat16 does not run on cpu: RuntimeError: no",
        ),
    ]
    lines = suite_report.render(results, "cpu: Example x 2")
    text = "\n".join(lines)
    assert lines[0] == "t.py::test_m on cpu (cpu: Example x 2)"
    header = lines[2].split("  ")
    assert [h.strip() for h in header if h.strip()] == [
        "batch",
        "float32 eager",
        "float32 compile",
        "bfloat16 eager",
        "float32 compile speed-up",
    ]
    row_b1 = lines[4].split()
    assert row_b1[:5] == ["1", "1", "ms", "1k/s", "0.5"]
    assert "2.00x" in lines[4] and "4.00x" in lines[5]
    assert "skipped" in lines[5]
    assert "-40.0 % improved" in text and "+5.0 % ok" in text
    assert (
        "compile time (first call, not in the latency above): float32 b1 2 s, float32 b8 1.5 s"
        in text
    )
    assert "skipped bfloat16 eager: bfloat16 does not run on cpu: RuntimeError: no" in text
    widths = {len(line) for line in lines[2:6]}
    assert len(widths) == 1  # aligned


def test_rates_and_file_names():
    assert suite_report.fmt_rate(12.0) == "12/s"
    assert suite_report.fmt_rate(12_345.0) == "12.3k/s"
    assert suite_report.fmt_rate(2.5e6) == "2.5M/s"
    assert (
        suite_report.plot_name("tests/test_m.py::test_m", "cuda:0")
        == "tests_test_m.py_test_m-cuda_0.png"
    )


def test_json_and_plot_files(tmp_path):
    results = [
        result("float32", "eager", 1, 1.0),
        result("float32", "eager", 8, 3.0),
        result("float32", "compile", 8, 2.0),
    ]
    path = tmp_path / "sub" / "bench.json"
    suite_report.write_json(path, results, {"key": "cpu: Example x 2"})
    document = json.loads(path.read_text())
    assert document["format"] == 1
    assert document["fingerprint"]["key"] == "cpu: Example x 2"
    assert [c["test_id"] for c in document["cases"]] == sorted(r.test_id for r in results)
    assert CaseResult.from_json(json.dumps(document["cases"][0])) in results
    (png,) = suite_report.write_plots(tmp_path / "plots", results, "cpu: Example x 2")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


def test_the_summary_names_the_machine_the_cases_were_measured_on():
    """xdist's controller reports the workers' cases with the machine they measured on,
    never asking for its own fingerprint (which imports torch: under Valgrind, in
    instruction-count mode, that was 20 s of CPU at the end of a run)."""
    from types import SimpleNamespace

    from pytest_torch.perf import results

    def no_fingerprint():
        raise AssertionError("the controller asked for its own fingerprint")

    session = SimpleNamespace(
        records=[], compile_records=[], pending={}, benchmark_outputs=[], machine=no_fingerprint,
        benchmark_results=[result("float32", "eager", 1, 1.0, machine="cpu: Worker CPU x 2")],
    )  # fmt: skip
    (title, lines), *_ = results.summary(session)
    assert title == "torch benchmark"
    assert lines[0] == "t.py::test_m on cpu (cpu: Worker CPU x 2)"
    # where no case says, the session's own machine
    session.benchmark_results[0].machine = ""
    session.machine = lambda: "cpu: This CPU x 2"
    assert results.summary(session)[0][1][0] == "t.py::test_m on cpu (cpu: This CPU x 2)"
