"""What a perf session gathers while it runs, beside its fixed settings: the engine it
measures with, new baselines per section and key, the records of the end-of-run tables,
benchmark results, and the baseline file and machine key, each read once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_torch.core.fingerprint import hardware_fingerprint
from pytest_torch.perf.baselines import BaselineFile, BaselineFileError
from pytest_torch.perf.engines import entry_parsers
from pytest_torch.perf.engines.base import Engine
from pytest_torch.perf.options import UPDATE
from pytest_torch.perf.settings import PerfSettings

if TYPE_CHECKING:
    from pytest_torch.perf.compilation.checks import CompileRecord
    from pytest_torch.perf.records import PerfRecord
    from pytest_torch.perf.suites.cases import CaseResult


class PerfSession:
    """A session's settings, its engine, and what it records."""

    def __init__(self, settings: PerfSettings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        #: new baselines: section -> key -> label -> entry, written at the end
        self.pending: dict[str, dict[str, dict[str, Any]]] = {}
        self.records: list[PerfRecord] = []
        self.compile_records: list[CompileRecord] = []
        self.benchmark_results: list[CaseResult] = []
        self.benchmarks_deselected = 0
        self.benchmark_outputs: list[Path] = []
        self._file: BaselineFile | None = None
        self._machine: str | None = None

    def file(self) -> BaselineFile:
        """The baseline file, each engine's section parsed by its own entries."""
        if self._file is None:
            self._file = BaselineFile(
                self.settings.baseline_path, entry_parsers(), rerecord=self.rerecord()
            )
        return self._file

    def rerecord(self) -> str:
        """The command that records this run's baselines: ``pytest --torch-update-perf``
        with the engine's option (``--torch-perf-measure=instructions``)."""
        return f"pytest {UPDATE}{self.engine.option}"

    def machine(self) -> str:
        """This machine's hardware fingerprint key (the wall clock's baseline key)."""
        if self._machine is None:
            self._machine = hardware_fingerprint().key
        return self._machine

    def keep(self, section: str, key: str, label: str, entry: Any) -> None:
        """A new baseline, written into the file at the end of the run."""
        self.pending.setdefault(section, {}).setdefault(key, {})[label] = entry

    def check_file(self) -> None:
        """Before any test runs (and before an engine starts the session another way):
        refuse when the baseline file cannot be read (a comparing run would fail every
        check with it, a recording run could not merge into it), or a recording run
        could not save its baselines."""
        try:
            if self.settings.update:
                self.file().check_writable()
            self.file().read()
        except BaselineFileError as exc:
            raise pytest.UsageError(str(exc)) from None

    def header(self) -> list[str]:
        """The lines of the run's header: the engine's, or the thread count and a
        warning if the measuring threads overrun the cores."""
        own = self.engine.header(self)
        if own is not None:
            return own
        settings = self.settings
        if not settings.announced and settings.threads_warning is None:
            return []
        lines = [f"torch perf: measurements on {settings.threads_text()}"]
        if settings.threads_warning is not None:
            lines.append(f"  WARNING: {settings.threads_warning}")
        return lines


session_key = pytest.StashKey[PerfSession]()
