"""pytest-torch-perf: latency budgets, performance baselines, host-sync checks,
torch.compile health and benchmark suites.

Its public names are ``EXPORTS`` below (name -> module; the same imports under
``TYPE_CHECKING`` are for type checkers), each imported on first use, so importing the
package is cheap and never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.exports import lazy_names

if TYPE_CHECKING:
    from pytest_torch.perf.compilation.checks import GraphBreakError as GraphBreakError
    from pytest_torch.perf.compilation.checks import (
        assert_no_graph_breaks as assert_no_graph_breaks,
    )
    from pytest_torch.perf.engines.wall.latency import measure_latency as measure_latency
    from pytest_torch.perf.engines.wall.timing import LatencyResult as LatencyResult
    from pytest_torch.perf.outcome import PerfNotJudgedError as PerfNotJudgedError
    from pytest_torch.perf.outcome import PerfRegressionError as PerfRegressionError
    from pytest_torch.perf.suites.cases import benchmark_suite as benchmark_suite
    from pytest_torch.perf.syncs.checks import assert_no_host_sync as assert_no_host_sync
    from pytest_torch.perf.syncs.checks import find_host_syncs as find_host_syncs

#: public name -> the module that defines it, imported on first use
EXPORTS = {
    "GraphBreakError": "pytest_torch.perf.compilation.checks",
    "assert_no_graph_breaks": "pytest_torch.perf.compilation.checks",
    "measure_latency": "pytest_torch.perf.engines.wall.latency",
    "LatencyResult": "pytest_torch.perf.engines.wall.timing",
    "PerfNotJudgedError": "pytest_torch.perf.outcome",
    "PerfRegressionError": "pytest_torch.perf.outcome",
    "benchmark_suite": "pytest_torch.perf.suites.cases",
    "assert_no_host_sync": "pytest_torch.perf.syncs.checks",
    "find_host_syncs": "pytest_torch.perf.syncs.checks",
}
__all__ = [
    "GraphBreakError",
    "LatencyResult",
    "PerfNotJudgedError",
    "PerfRegressionError",
    "assert_no_graph_breaks",
    "assert_no_host_sync",
    "benchmark_suite",
    "find_host_syncs",
    "measure_latency",
]

__getattr__, __dir__ = lazy_names(__name__, EXPORTS)
