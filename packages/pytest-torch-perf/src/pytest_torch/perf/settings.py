"""The perf options of a session, read once (``options.read_settings``) and never
changed; what the session records lives in ``state``. No torch here: this runs on
every pytest start-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class PerfSettings:
    """The perf options of a session."""

    update: bool
    strict: bool
    baseline_path: Path
    max_time: float
    slack_ms: float
    #: torch's intra-op threads while measuring (--torch-perf-threads), and a warning
    #: when the measuring threads of all workers overrun the cores
    threads: int
    threads_warning: str | None = None
    #: the sampling cap of a busy measurement, and the undisturbed samples it needs
    busy_max_time: float = 3.0
    min_undisturbed: int = 5
    #: how many fresh processes may measure a short call's modest regression again
    fresh_processes: int = 10
    #: --torch-perf-measure: the engine's name
    measure: str = "wall"
    #: the session's tolerances per perf_baseline keyword that takes one from an option
    #: (--torch-perf-instruction-tolerance), and the instruction slack
    tolerances: tuple[tuple[str, float], ...] = ()
    slack_instructions: int = 0
    benchmark: bool = False
    benchmark_json: Path | None = None
    benchmark_plot: Path | None = None

    @property
    def announced(self) -> bool:
        """The run asked something of perf at start-up (a thread count, recording,
        benchmarks): its header says how perf measures; otherwise the end-of-run table
        does, so suites without perf tests get no perf line."""
        return self.threads != 1 or self.update or self.benchmark

    def threads_text(self) -> str:
        """``2 intra-op threads (--torch-perf-threads)``."""
        count = self.threads
        return f"{count} intra-op thread{'s' if count != 1 else ''} (--torch-perf-threads)"


settings_key = pytest.StashKey[PerfSettings]()
