"""Benchmark suites in real runs: ids, opt-in, skips, report, JSON, PNG, xdist, baselines.

Compile mode uses torch.compile's "eager" backend here: it traces with dynamo like the
default backend but skips code generation, which keeps the tests quick.
"""

from __future__ import annotations

import json

import pytest

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

SUITE = """
import torch

from pytest_torch.perf import benchmark_suite


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.layers(x)


@benchmark_suite(batch_sizes=(1, 8), dtypes=("float32", "bfloat16"), modes=("eager", "compile"),
                 compile_options={"backend": "eager"}, latency_tolerance=10.0)
def test_net(batch_size):
    return Net(), torch.randn(batch_size, 16)


def test_ordinary():
    pass
"""
FAST = "--torch-perf-max-time=0.05"
IDS = [
    f"test_suite.py::test_net[cpu-{dtype}-{mode}-b{batch}]"
    for dtype in ("float32", "bfloat16")
    for mode in ("eager", "compile")
    for batch in (1, 8)
]


@pytest.fixture
def suite(pytester, quiet_machine):
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def test_each_case_is_a_test_with_a_stable_id(suite, run):
    result = run("--collect-only", "-q", "--torch-benchmark")
    for test_id in IDS:
        result.stdout.fnmatch_lines([test_id])
    result = run(FAST, "--torch-benchmark", "-v", "-k", "float32-eager-b8")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_net[[]cpu-float32-eager-b8[]] PASSED*"])


def test_benchmarks_are_opt_in_and_deselected_with_a_notice(suite, run):
    result = run(FAST)
    result.assert_outcomes(passed=1, deselected=8)
    result.stdout.fnmatch_lines(
        ["torch benchmark: 8 benchmark case(s) deselected; run them with --torch-benchmark"]
    )
    suite.makeini("[pytest]\ntorch_benchmark = true\n")
    run(FAST).assert_outcomes(passed=9)


def test_report_json_and_plot(suite, run):
    result = run(
        FAST,
        "--torch-benchmark",
        "--torch-benchmark-json=out/bench.json",
        "--torch-benchmark-plot=plots",
    )
    result.assert_outcomes(passed=9)
    result.stdout.fnmatch_lines(
        [
            "*- torch benchmark -*",
            "test_suite.py::test_net on cpu (cpu: *)",
            "  median latency per call and throughput (samples/s = batch / median)",
            "  batch*float32 eager*float32 compile*bfloat16 eager*bfloat16 compile*float32 compile speed-up*bfloat16 compile speed-up",
            "  1 */s*/s*/s*/s*x*x",
            "  8 */s*/s*/s*/s*x*x",
            "  no baselines for this machine yet: record them with pytest --torch-benchmark --torch-update-perf",
            "  compile time (first call, not in the latency above): float32 b1 *",
            "benchmark output: *bench.json",
            "benchmark output: *test_suite.py_test_net-cpu.png",
        ]
    )
    document = json.loads((suite.path / "out" / "bench.json").read_text())
    assert document["format"] == 1
    assert document["fingerprint"]["key"].startswith("cpu: ")
    assert sorted(case["test_id"] for case in document["cases"]) == sorted(IDS)
    case = next(c for c in document["cases"] if c["test_id"].endswith("float32-eager-b8]"))
    assert case["status"] == "ok"
    assert case["throughput"] == pytest.approx(8 / (case["median_ms"] / 1e3))
    assert {"p90_ms", "min_ms", "spread", "runs", "peak_memory", "first_call_ms", "verdict"} <= set(
        case
    )
    png = suite.path / "plots" / "test_suite.py_test_net-cpu.png"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_every_case_reaches_the_report_under_xdist(suite, run):
    result = run(
        FAST, "--torch-benchmark", "--torch-benchmark-json=bench.json", "-p", "xdist", "-n", "2"
    )
    result.assert_outcomes(passed=9)
    document = json.loads((suite.path / "bench.json").read_text())
    assert sorted(case["test_id"] for case in document["cases"]) == sorted(IDS)
    result.stdout.fnmatch_lines(["  1 * */s * */s * */s * */s *", "  8 * */s * */s * */s * */s *"])


def test_unsupported_dtype_and_failed_compile_skip_with_the_reason(pytester, run):
    pytester.makepyfile(
        """
        import torch

        from pytest_torch.perf import benchmark_suite


        class Float32Only(torch.nn.Module):
            def forward(self, x):
                if x.dtype != torch.float32:
                    raise RuntimeError("addmm_impl not implemented for 'Half'\\nlong details")
                return x + 1


        @benchmark_suite(batch_sizes=(2,), dtypes=("float32", "float16"))
        def test_dtypes(batch_size):
            return Float32Only(), torch.randn(batch_size, 3)


        @benchmark_suite(batch_sizes=(2,), modes=("eager", "compile"), compile_options={"backend": "no_such_backend"})
        def test_compile(batch_size):
            return Float32Only(), torch.randn(batch_size, 3)
        """
    )
    result = run(FAST, "--torch-benchmark", "-rs")
    result.assert_outcomes(passed=2, skipped=2)
    for line in (
        "SKIPPED [[]1[]] *: float16 does not run on cpu: RuntimeError: addmm_impl not implemented for 'Half'",
        "SKIPPED [[]1[]] *: torch.compile is unavailable: *no_such_backend*",
        "  skipped float16 eager: float16 does not run on cpu: *",
    ):
        result.stdout.fnmatch_lines([line])


def test_a_broken_reference_case_fails(pytester, run):
    pytester.makepyfile(
        """
        import torch

        from pytest_torch.perf import benchmark_suite


        @benchmark_suite(batch_sizes=(2,))
        def test_broken(batch_size):
            return torch.nn.Linear(3, 3), torch.randn(batch_size, 5)
        """
    )
    result = run(FAST, "--torch-benchmark")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E   *RuntimeError: mat1 and mat2 shapes cannot be multiplied*"])


def test_baselines_are_recorded_and_compared_like_perf_baseline(suite, run):
    run(FAST, "--torch-benchmark", "--torch-update-perf").assert_outcomes(passed=9)
    (machine,) = json.loads((suite.path / ".torch-perf-baselines.json").read_text())[
        "machines"
    ].values()
    assert sorted(machine) == sorted(IDS)
    result = run(FAST, "--torch-benchmark", "-k", "float32-eager")
    result.assert_outcomes(passed=2, deselected=7)
    result.stdout.fnmatch_lines(["  1 * % ok*"])
    document = json.loads((suite.path / ".torch-perf-baselines.json").read_text())
    for entry in next(iter(document["machines"].values())).values():
        entry["latency_ms"] = 1e-9
    (suite.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    result = run(FAST, "--torch-benchmark", "--torch-perf-slack-ms=0", "-k", "float32-eager-b1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * performance regression in test_suite.py::test_net[[]cpu-float32-eager-b1[]]:",
            "E * re-record with: pytest --torch-update-perf 'test_suite.py::test_net[[]cpu-float32-eager-b1[]]'",
        ]
    )
    result.stdout.fnmatch_lines(["  1 * REGRESSION*"])


@pytest.mark.parametrize(
    ("factor", "outcome", "verdict"),
    [(35, "skipped", "not judged: machine busy"), (1e6, "failed", "REGRESSION (machine busy)")],
)
def test_a_case_over_its_baseline_on_a_busy_machine_is_judged_in_proportion(
    suite, run, machine, factor, outcome, verdict
):
    run(FAST, "--torch-benchmark", "--torch-update-perf", "-k", "float32-eager").assert_outcomes(
        passed=2, deselected=7
    )
    document = json.loads((suite.path / ".torch-perf-baselines.json").read_text())
    for entry in next(iter(document["machines"].values())).values():
        entry["latency_ms"] /= factor  # the suite's tolerance is 10: a limit of 11x
    (suite.path / ".torch-perf-baselines.json").write_text(json.dumps(document))
    machine("busy")  # the process waits 90 %: 35x is explained, a million times is not
    args = (FAST, "--torch-perf-busy-max-time=0.1", "--torch-benchmark", "--torch-perf-slack-ms=0")
    result = run(*args, "-k", "float32-eager", "-rs")
    result.assert_outcomes(**{outcome: 2}, deselected=7)
    result.stdout.fnmatch_lines(
        ["  change vs baseline (statistic: min) and verdict", f"  1 * {verdict}"]
    )
    if outcome == "skipped":
        result.stdout.fnmatch_lines(
            [
                "SKIPPED * test_suite.py::test_net[[]cpu-float32-eager-b*[]]: not judged: machine busy.*"
            ]
        )
        run(*args, "-k", "float32-eager", "--torch-perf-strict").assert_outcomes(
            failed=2, deselected=7
        )


def test_missing_baseline_is_reported_and_strict_fails(suite, run):
    result = run(FAST, "--torch-benchmark", "-k", "float32-eager-b1")
    result.assert_outcomes(passed=1, deselected=8)
    result.stdout.fnmatch_lines(["  no baselines for this machine yet: record them with*"])
    run(FAST, "--torch-benchmark", "--torch-perf-strict", "-k", "float32-eager-b1").assert_outcomes(
        failed=1, deselected=8
    )


@pytest.mark.parametrize(
    ("declaration", "signature", "expected"),
    [
        (
            "@benchmark_suite(batch_sizes=(1, -2))",
            "(batch_size)",
            "batch_sizes must be positive integers",
        ),
        (
            '@benchmark_suite(batch_sizes=1, dtypes=("fp32",))',
            "(batch_size)",
            "unknown dtype 'fp32'",
        ),
        (
            '@benchmark_suite(batch_sizes=1, modes=("jit",))',
            "(batch_size)",
            "modes must be 'eager' and/or 'compile'",
        ),
        ("@benchmark_suite(batch_sizes=1)", "()", "a @benchmark_suite function takes batch_size"),
        (
            "@pytest.mark.torch_benchmark(batch_sizes=(1,))",
            "(batch_size)",
            "declare benchmark suites with the @benchmark_suite",
        ),
    ],
)
def test_bad_declarations_are_collection_errors(pytester, run, declaration, signature, expected):
    pytester.makepyfile(
        f"""
        import pytest
        import torch
        from pytest_torch.perf import benchmark_suite

        {declaration}
        def test_suite{signature}:
            return torch.nn.Linear(1, 1), torch.ones(1, 1)
        """
    )
    result = run("--torch-benchmark")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*::test_suite: *{expected}*"])
    assert "Traceback" not in result.stdout.str()


def test_plot_without_matplotlib_is_a_usage_error(suite, run, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    result = run("--torch-benchmark-plot=plots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --torch-benchmark-plot draws with matplotlib, which is not installed*"]
    )


def test_torch_devices_marker_narrows_the_devices(pytester, run):
    pytester.makepyfile(
        """
        import pytest
        import torch

        from pytest_torch.perf import benchmark_suite


        @pytest.mark.torch_devices("cuda")
        @benchmark_suite(batch_sizes=(1,))
        def test_gpu_suite(batch_size):
            return torch.nn.Linear(2, 2), torch.ones(batch_size, 2)
        """
    )
    result = run("--collect-only", "-q", "--torch-benchmark")
    result.stdout.no_fnmatch_line("*[[]cpu-*")


@pytest.mark.accelerator
def test_a_suite_on_the_accelerator_in_eager_and_compile(suite, run, tmp_path, accelerator):
    """Every case on the accelerator: bfloat16 and compile work there, the first call
    (compile time) is reported apart from the latency, and the JSON says where it ran."""
    out = tmp_path / "bench.json"
    result = run(
        FAST,
        "--torch-benchmark",
        f"--torch-device={accelerator}",
        f"--torch-benchmark-json={out}",
        "-v",
    )
    result.assert_outcomes(passed=9)
    for test_id in IDS:
        result.stdout.fnmatch_lines([f"{test_id.replace('[cpu-', f'[[]{accelerator}-')} PASSED*"])
    result.stdout.fnmatch_lines(["*compile time (first call, not in the latency above): *"])
    cases = json.loads(out.read_text())["cases"]
    assert {case["device"].split(":")[0] for case in cases} == {accelerator}
    assert all(case["status"] == "ok" for case in cases), cases
