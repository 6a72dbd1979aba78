"""pytest-torch-perf: latency budgets, performance baselines and host-sync checks.

Public names: :func:`assert_no_graph_breaks`, :class:`GraphBreakError`,
:func:`assert_no_host_sync`, :func:`find_host_syncs`,
:func:`measure_latency`, :class:`LatencyResult`, :class:`PerfRegressionError`,
:class:`PerfNotJudgedError`.
Imported on first use; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import exports_of, lazy_exports

if TYPE_CHECKING:
    from pytest_torch.perf.checks import PerfNotJudgedError, PerfRegressionError
    from pytest_torch.perf.compilation.checks import GraphBreakError, assert_no_graph_breaks
    from pytest_torch.perf.measure.calls import measure_latency
    from pytest_torch.perf.measure.timing import LatencyResult
    from pytest_torch.perf.suites.cases import benchmark_suite
    from pytest_torch.perf.syncs.checks import assert_no_host_sync, find_host_syncs

_EXPORTS = exports_of("perf")

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
