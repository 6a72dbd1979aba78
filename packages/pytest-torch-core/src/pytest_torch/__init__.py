__path__ = __import__("pkgutil").extend_path(__path__, __name__)
# The line above makes pytest_torch a namespace shared by every package of the family
# (editable installs put each package in its own folder).
#
# The family's public names in one place, whichever of its packages are installed.
# This file ships in pytest-torch-core, which every package depends on, so
# `from pytest_torch import assert_no_host_sync` works with pytest-torch-perf installed
# alone. Each name is imported from its package on first use (PEP 562): importing
# `pytest_torch` is free and never imports torch. A name whose package is not installed
# raises ImportError naming the distribution to install.
#
# One catalogue for the whole family, kept here rather than assembled from the
# installed packages: only a catalogue that lists the packages which are *not*
# installed can say which one to install. The family shares one version, so this list
# and the packages cannot drift apart. The catalogue is `FAMILY_EXPORTS` in
# core/lazy.py (each package's own `__init__` serves its part of it); to add a name:
# there, in `__all__` and in the TYPE_CHECKING imports below (and in the package's).

from typing import TYPE_CHECKING

from pytest_torch.core.lazy import FAMILY_EXPORTS, lazy_exports

if TYPE_CHECKING:
    from pytest_torch.core.compare import (
        Mismatch,
        TensorMismatchError,
        assert_close,
    )
    from pytest_torch.core.fingerprint import HardwareFingerprint, hardware_fingerprint
    from pytest_torch.core.memory import PeakMemory, PeakTracker
    from pytest_torch.determinism.assertion import (
        InputsChangedWarning,
        NondeterminismError,
        assert_deterministic,
    )
    from pytest_torch.determinism.diagnosis import Diagnosis, diagnose_nondeterminism
    from pytest_torch.determinism.outputs import CannotCompare
    from pytest_torch.memory.api import assert_max_memory, assert_no_memory_leak
    from pytest_torch.memory.budgets import MemoryBudgetError
    from pytest_torch.memory.leaks import MemoryLeakError
    from pytest_torch.perf.checks import PerfNotJudgedError, PerfRegressionError
    from pytest_torch.perf.compilation.checks import GraphBreakError, assert_no_graph_breaks
    from pytest_torch.perf.measure.calls import measure_latency
    from pytest_torch.perf.measure.timing import LatencyResult
    from pytest_torch.perf.suites.cases import benchmark_suite
    from pytest_torch.perf.syncs.checks import assert_no_host_sync, find_host_syncs

_EXPORTS = FAMILY_EXPORTS

__all__ = [
    "CannotCompare",
    "Diagnosis",
    "GraphBreakError",
    "HardwareFingerprint",
    "InputsChangedWarning",
    "LatencyResult",
    "MemoryBudgetError",
    "MemoryLeakError",
    "Mismatch",
    "NondeterminismError",
    "PeakMemory",
    "PeakTracker",
    "PerfNotJudgedError",
    "PerfRegressionError",
    "TensorMismatchError",
    "assert_close",
    "assert_deterministic",
    "assert_max_memory",
    "assert_no_graph_breaks",
    "assert_no_host_sync",
    "assert_no_memory_leak",
    "benchmark_suite",
    "diagnose_nondeterminism",
    "find_host_syncs",
    "hardware_fingerprint",
    "measure_latency",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
