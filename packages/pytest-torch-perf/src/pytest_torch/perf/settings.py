"""The perf options of a session: read, checked, and kept with what the session records.

``read_settings`` turns the command line and ini values into a :class:`PerfSettings`,
or stops the run with a usage error that names the option, the value and an example.
No torch here: this runs on every pytest start-up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_torch.core.options import float_option, int_option, option_or_ini, option_source
from pytest_torch.core.session import xdist_worker
from pytest_torch.perf.rule import DEFAULT_INSTRUCTION_SLACK, DEFAULT_INSTRUCTION_TOLERANCE

if TYPE_CHECKING:
    from pytest_torch.perf.baselines import Baseline, BaselineFile, InstructionBaseline
    from pytest_torch.perf.check_records import PerfRecord
    from pytest_torch.perf.compilation.checks import CompileRecord
    from pytest_torch.perf.measure.timing import SamplingSettings
    from pytest_torch.perf.suites.cases import CaseResult


class PerfSettings:
    """The perf options of a session, and what the session records."""

    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(
        self,
        update: bool,
        strict: bool,
        baseline_path: Path,
        max_time: float,
        slack_ms: float,
        threads: int,
        busy_max_time: float = 3.0,
        min_undisturbed: int = 5,
        fresh_processes: int = 10,
        measure: str = "wall",
        instruction_tolerance: float = DEFAULT_INSTRUCTION_TOLERANCE,
        slack_instructions: int = DEFAULT_INSTRUCTION_SLACK,
    ) -> None:
        self.update = update
        self.strict = strict
        self.baseline_path = baseline_path
        self.max_time = max_time
        #: the sampling cap of a busy measurement, and the undisturbed samples it needs
        self.busy_max_time = busy_max_time
        self.min_undisturbed = min_undisturbed
        #: how many fresh processes may measure a short call's modest regression again
        self.fresh_processes = fresh_processes
        self.slack_ms = slack_ms
        #: "wall" or "instructions" (--torch-perf-measure), and the latter's rule
        self.measure = measure
        self.instruction_tolerance = instruction_tolerance
        self.slack_instructions = slack_instructions
        self.instruction_pending: dict[str, dict[str, InstructionBaseline]] = {}
        #: torch's intra-op threads while measuring (--torch-perf-threads)
        self.threads = threads
        self.threads_warning: str | None = None
        #: the run asked something of perf at start-up (a thread count, recording,
        #: benchmarks): its header says how perf measures; otherwise the end-of-run table
        #: does, so suites without perf tests get no perf line
        self.announced = False
        self.pending: dict[str, dict[str, Baseline]] = {}
        self.records: list[PerfRecord] = []
        self.compile_records: list[CompileRecord] = []
        self.benchmark = False
        self.benchmark_json: Path | None = None
        self.benchmark_plot: Path | None = None
        self.benchmark_results: list[CaseResult] = []
        self.benchmarks_deselected = 0
        self.benchmark_outputs: list[Path] = []
        self._file: BaselineFile | None = None
        self._machine: str | None = None

    def sampling(self) -> SamplingSettings:
        from pytest_torch.perf.measure.timing import SamplingSettings

        return SamplingSettings(
            max_time=self.max_time,
            busy_max_time=max(self.busy_max_time, self.max_time),
            min_undisturbed=self.min_undisturbed,
        )

    def file(self) -> BaselineFile:
        if self._file is None:
            from pytest_torch.perf.baselines import BaselineFile

            self._file = BaselineFile(self.baseline_path)
        return self._file

    def machine(self) -> str:
        if self._machine is None:
            from pytest_torch.core.fingerprint import hardware_fingerprint

            self._machine = hardware_fingerprint().key
        return self._machine

    def header(self) -> list[str]:
        """The lines of the run's header: the thread count, and a warning if it overruns."""
        if self.measure == "instructions":
            from pytest_torch.perf.measure.valgrind import session_header

            return [session_header()]
        if not self.announced and self.threads_warning is None:
            return []
        lines = [f"torch perf: measurements on {self.threads_text()}"]
        if self.threads_warning is not None:
            lines.append(f"  WARNING: {self.threads_warning}")
        return lines

    def threads_text(self) -> str:
        """``2 intra-op threads (--torch-perf-threads)``."""
        count = self.threads
        return f"{count} intra-op thread{'s' if count != 1 else ''} (--torch-perf-threads)"


settings_key = pytest.StashKey[PerfSettings]()


def instruction_rule(config: pytest.Config) -> tuple[float, int]:
    """The instruction tolerance and slack; a usage error naming the option for a bad one."""
    tolerance = float_option(
        config,
        "torch_perf_instruction_tolerance",
        "--torch-perf-instruction-tolerance",
        zero=True,
        example=f"{DEFAULT_INSTRUCTION_TOLERANCE:g}",
    )
    slack = int_option(
        config,
        "torch_perf_slack_instructions",
        "--torch-perf-slack-instructions",
        minimum=0,
        example=DEFAULT_INSTRUCTION_SLACK,
    )
    return tolerance, slack


def read_settings(config: pytest.Config) -> PerfSettings:
    """The session's settings from its options; a usage error for a bad one."""
    update = bool(option_or_ini(config, "torch_update_perf"))
    path = Path(str(option_or_ini(config, "torch_perf_baselines")))
    instruction_tolerance, slack_instructions = instruction_rule(config)
    settings = PerfSettings(
        measure=measure_mode(config),
        instruction_tolerance=instruction_tolerance,
        slack_instructions=slack_instructions,
        update=update,
        strict=bool(option_or_ini(config, "torch_perf_strict")),
        baseline_path=path if path.is_absolute() else config.rootpath / path,
        max_time=float_option(config, "torch_perf_max_time", "--torch-perf-max-time"),
        slack_ms=float_option(
            config, "torch_perf_slack_ms", "--torch-perf-slack-ms", zero=True, example="0.001"
        ),
        threads=thread_count(config),
        busy_max_time=float_option(
            config, "torch_perf_busy_max_time", "--torch-perf-busy-max-time", example="3.0"
        ),
        min_undisturbed=int_option(
            config,
            "torch_perf_min_undisturbed",
            "--torch-perf-min-undisturbed",
            minimum=1,
            example=5,
        ),
        fresh_processes=int_option(
            config,
            "torch_perf_fresh_processes",
            "--torch-perf-fresh-processes",
            minimum=0,
            example=10,
        ),
    )
    if xdist_worker(config) is None:
        settings.threads_warning = threads_warning(config, settings.threads)
        if settings.threads_warning is not None:  # in the header, and the summary for -q
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(settings.threads_warning), stacklevel=2
            )
    if update:
        from pytest_torch.perf.baselines import BaselineFileError

        try:
            settings.file().check_writable()  # refuse early rather than lose recordings
            settings.file().read()
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    settings.benchmark = bool(option_or_ini(config, "torch_benchmark"))
    # a thread count other than the default's one thread is worth a line in the header
    settings.announced = settings.threads != 1 or update or settings.benchmark
    settings.benchmark_json = path_option(config, "torch_benchmark_json")
    settings.benchmark_plot = path_option(config, "torch_benchmark_plot", folder=True)
    if settings.benchmark_plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise pytest.UsageError(
            "--torch-benchmark-plot draws with matplotlib, which is not installed:"
            ' pip install matplotlib (or pip install "pytest-torch[perf]")'
        )
    return settings


MEASURE_MODES = ("wall", "instructions")


def measure_mode(config: pytest.Config) -> str:
    """``--torch-perf-measure``: wall or instructions; a usage error naming its source."""
    value = str(option_or_ini(config, "torch_perf_measure")).strip()
    if value not in MEASURE_MODES:
        source = option_source(config, "torch_perf_measure", "--torch-perf-measure")
        raise pytest.UsageError(
            f"{source}: expected one of {', '.join(MEASURE_MODES)}, got {value!r}."
            f" Example: --torch-perf-measure=instructions (counts instructions under"
            f" Valgrind; wall, the default, times on this machine's clock)"
        )
    return value


def thread_count(config: pytest.Config) -> int:
    """``--torch-perf-threads``: a whole number >= 1, with why 1 is the default."""
    value = option_or_ini(config, "torch_perf_threads")
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        source = option_source(config, "torch_perf_threads", "--torch-perf-threads")
        raise pytest.UsageError(
            f"{source}: expected a positive whole number of threads for perf measurements,"
            f" got {value!r}. Example: --torch-perf-threads=1 (the default: one thread is"
            f" the least disturbed by a busy machine and the same with or without -n)"
        )
    return int(text)


def threads_warning(config: pytest.Config, threads: int) -> str | None:
    """A warning when the measuring threads of all workers overrun the cores."""
    from pytest_torch.core.cpus import available_cores, overrun

    workers = config.getoption("numprocesses", default=None)
    processes = workers if isinstance(workers, int) and workers > 0 else 1
    how = overrun(threads, processes, available_cores())
    if how is None:
        return None
    return (
        f"--torch-perf-threads={threads}: {how} while measuring; measurements whose"
        f" threads wait for a CPU are not judged (machine busy). Use fewer threads or"
        f" fewer workers."
    )


def path_option(config: pytest.Config, ini: str, *, folder: bool = False) -> Path | None:
    """A path the run writes (a file, or a ``folder``), relative to where pytest was
    started; None when unset; a usage error when it cannot be written."""
    from pytest_torch.core.paths import unwritable

    value = option_or_ini(config, ini)
    if not value:
        return None
    path = Path(str(value))
    path = path if path.is_absolute() else config.invocation_params.dir / path
    problem = unwritable(path, folder=folder)
    if problem is not None:
        source = option_source(config, ini, "--" + ini.replace("_", "-"))
        raise pytest.UsageError(
            f"{source}: cannot write {path}: {problem}. Choose a writable path."
        )
    return path
