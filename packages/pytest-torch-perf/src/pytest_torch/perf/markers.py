"""The perf plugin's markers, declared once (help line and arguments); importing this
never imports the engines or torch."""

from __future__ import annotations

from pytest_torch.core.markers import MarkerSpec

LATENCY = MarkerSpec(
    "torch_max_latency",
    "fail the test if a latency(...) call in it takes longer than ms milliseconds (stat:"
    " median, mean, min, p90, p99).",
    positional=("ms", "stat"),
    defaults={"stat": "median"},
    example="@pytest.mark.torch_max_latency(ms=50) or (50, stat='p90')",
)
#: set by @benchmark_suite, never written by hand
BENCHMARK = MarkerSpec(
    "torch_benchmark",
    "set by @benchmark_suite; one test per device x dtype x mode x batch size, run with"
    " --torch-benchmark.",
    defaults={
        "batch_sizes": None,
        "dtypes": None,
        "modes": None,
        "compile_options": None,
        "latency_tolerance": None,
    },
)
COMPILE_BUDGET = MarkerSpec(
    "torch_compile_budget",
    "fail the test if torch.compile, during the test body, recompiles or breaks its graph"
    " more often than allowed, or compiles for longer than seconds (counted from an"
    " empty compile cache).",
    positional=("recompiles", "graph_breaks", "seconds"),
    defaults={"recompiles": 0, "graph_breaks": 0, "seconds": None},
    example="@pytest.mark.torch_compile_budget(recompiles=0, graph_breaks=0, seconds=60)",
)
