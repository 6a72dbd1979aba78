"""pytest-torch-perf: latency budgets, performance baselines, host-sync checks,
torch.compile health and benchmark suites.

Its public names are the imports under ``TYPE_CHECKING`` below, each imported on first
use; nothing here imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import package_exports

if TYPE_CHECKING:
    from pytest_torch.perf.checks import PerfNotJudgedError as PerfNotJudgedError
    from pytest_torch.perf.checks import PerfRegressionError as PerfRegressionError
    from pytest_torch.perf.compilation.checks import GraphBreakError as GraphBreakError
    from pytest_torch.perf.compilation.checks import (
        assert_no_graph_breaks as assert_no_graph_breaks,
    )
    from pytest_torch.perf.measure.calls import measure_latency as measure_latency
    from pytest_torch.perf.measure.timing import LatencyResult as LatencyResult
    from pytest_torch.perf.suites.cases import benchmark_suite as benchmark_suite
    from pytest_torch.perf.syncs.checks import assert_no_host_sync as assert_no_host_sync
    from pytest_torch.perf.syncs.checks import find_host_syncs as find_host_syncs

__getattr__, __dir__ = package_exports(__name__, __file__)
