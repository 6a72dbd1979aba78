__path__ = __import__("pkgutil").extend_path(__path__, __name__)
# The line above makes pytest_torch a namespace shared by every package of the family
# (editable installs put each package in its own folder).
#
# The family's public names in one place, whichever of its packages are installed.
# This file ships in pytest-torch-core, which every package depends on, so
# `from pytest_torch import assert_no_host_sync` works with pytest-torch-perf installed
# alone. Each name is imported from its package on first use (PEP 562): importing
# `pytest_torch` is free and never imports torch.
#
# A package declares its public names once, in its own `__init__` (`EXPORTS`, see
# core/exports.py). At run time this root serves the names of the packages it finds
# installed in the namespace: `__all__`, `dir()` and `from pytest_torch import *` follow
# them. The imports below are what type checkers read; `DISTRIBUTIONS` names the
# distribution of every name, so that one whose package is not installed raises an
# ImportError naming what to install (only a list that includes packages which are not
# installed can). A test checks that both say what the packages declare.

from typing import TYPE_CHECKING

from pytest_torch.core.exports import namespace_names

if TYPE_CHECKING:
    from pytest_torch.core import HardwareFingerprint as HardwareFingerprint
    from pytest_torch.core import Mismatch as Mismatch
    from pytest_torch.core import PeakMemory as PeakMemory
    from pytest_torch.core import PeakTracker as PeakTracker
    from pytest_torch.core import TensorMismatchError as TensorMismatchError
    from pytest_torch.core import assert_close as assert_close
    from pytest_torch.core import hardware_fingerprint as hardware_fingerprint
    from pytest_torch.determinism import CannotCompare as CannotCompare
    from pytest_torch.determinism import Diagnosis as Diagnosis
    from pytest_torch.determinism import InputsChangedWarning as InputsChangedWarning
    from pytest_torch.determinism import NondeterminismError as NondeterminismError
    from pytest_torch.determinism import assert_deterministic as assert_deterministic
    from pytest_torch.determinism import diagnose_nondeterminism as diagnose_nondeterminism
    from pytest_torch.distributed import assert_replicas_in_sync as assert_replicas_in_sync
    from pytest_torch.distributed import assert_same_across_ranks as assert_same_across_ranks
    from pytest_torch.memory import MemoryBudgetError as MemoryBudgetError
    from pytest_torch.memory import MemoryLeakError as MemoryLeakError
    from pytest_torch.memory import assert_max_memory as assert_max_memory
    from pytest_torch.memory import assert_no_memory_leak as assert_no_memory_leak
    from pytest_torch.perf import GraphBreakError as GraphBreakError
    from pytest_torch.perf import LatencyResult as LatencyResult
    from pytest_torch.perf import PerfNotJudgedError as PerfNotJudgedError
    from pytest_torch.perf import PerfRegressionError as PerfRegressionError
    from pytest_torch.perf import assert_no_graph_breaks as assert_no_graph_breaks
    from pytest_torch.perf import assert_no_host_sync as assert_no_host_sync
    from pytest_torch.perf import benchmark_suite as benchmark_suite
    from pytest_torch.perf import find_host_syncs as find_host_syncs
    from pytest_torch.perf import measure_latency as measure_latency

#: every public name of the family -> the distribution that ships it
DISTRIBUTIONS = {
    "HardwareFingerprint": "pytest-torch-core",
    "Mismatch": "pytest-torch-core",
    "PeakMemory": "pytest-torch-core",
    "PeakTracker": "pytest-torch-core",
    "TensorMismatchError": "pytest-torch-core",
    "assert_close": "pytest-torch-core",
    "hardware_fingerprint": "pytest-torch-core",
    "CannotCompare": "pytest-torch-determinism",
    "Diagnosis": "pytest-torch-determinism",
    "InputsChangedWarning": "pytest-torch-determinism",
    "NondeterminismError": "pytest-torch-determinism",
    "assert_deterministic": "pytest-torch-determinism",
    "diagnose_nondeterminism": "pytest-torch-determinism",
    "assert_replicas_in_sync": "pytest-torch-distributed",
    "assert_same_across_ranks": "pytest-torch-distributed",
    "MemoryBudgetError": "pytest-torch-memory",
    "MemoryLeakError": "pytest-torch-memory",
    "assert_max_memory": "pytest-torch-memory",
    "assert_no_memory_leak": "pytest-torch-memory",
    "GraphBreakError": "pytest-torch-perf",
    "LatencyResult": "pytest-torch-perf",
    "PerfNotJudgedError": "pytest-torch-perf",
    "PerfRegressionError": "pytest-torch-perf",
    "assert_no_graph_breaks": "pytest-torch-perf",
    "assert_no_host_sync": "pytest-torch-perf",
    "benchmark_suite": "pytest-torch-perf",
    "find_host_syncs": "pytest-torch-perf",
    "measure_latency": "pytest-torch-perf",
}

__getattr__, __dir__ = namespace_names(__name__, DISTRIBUTIONS)
