"""``@benchmark_suite`` (the ``torch_benchmark`` marker it sets): one test per case at
collection, and each case run in place of the suite function's body
(``suites.runner``)."""

from __future__ import annotations

import pytest

from pytest_torch.core.checks import Check
from pytest_torch.core.markers import MarkerSpec
from pytest_torch.perf import options
from pytest_torch.perf.state import session_key
from pytest_torch.perf.suites.cases import CASE_FIXTURE
from pytest_torch.perf.suites.runner import parametrize_suite, run_case

#: set by @benchmark_suite, never written by hand
BENCHMARK = MarkerSpec(
    "torch_benchmark",
    "set by @benchmark_suite; one test per device x dtype x mode x batch size, run with"
    f" {options.BENCHMARK}.",
    defaults={
        "batch_sizes": None,
        "dtypes": None,
        "modes": None,
        "compile_options": None,
        "latency_tolerance": None,
    },
)


class BenchmarkSuite(Check):
    marker = BENCHMARK

    def collect(self, metafunc: pytest.Metafunc) -> None:
        parametrize_suite(metafunc, BENCHMARK.mark_on(metafunc))

    def run_body(self, item: pytest.Function) -> bool:
        if CASE_FIXTURE not in item.funcargs:
            return False
        run_case(item, item.config.stash[session_key])
        return True
