"""The baseline file: recorded figures per machine and test (the rule that compares
with them is in ``rule``).

Layout (sorted keys, two-space indent, one trailing newline, so diffs stay small)::

    {
      "format": 1,
      "machines": {
        "<hardware fingerprint key>": {
          "<test node id>[::<name>]": {
            "latency_ms": 1.23, "stat": "median", "spread": 0.02,
            "peak_memory": {"cuda:0": 1048576},
            "device": "cpu", "threads": 1, "core_probe_us": 9.6,
            "torch": "2.13.0", "python": "3.11.7", "recorded": "2026-11-30T06:00:00+00:00",
            "samples": 731, "undisturbed_samples": 90      (only when recorded on a busy machine)
          }
        }
      },
      "instructions": {                      (--torch-perf-measure=instructions)
        "torch=2.13.0+cpu python=3.11.7 valgrind=3.19.0 cpu=x86_64/AVX2": {
          "<test node id>[::<name>]": {
            "instructions": 2025376, "spread": 0.0003, "repeats": 5,
            "functions": {"<function> (<object>)": 1803141, ...},
            "recorded": "2026-12-02T22:00:00+00:00"
          }
        }
      }
    }

Instruction counts are keyed by what changes them, not by the machine, so a count
recorded on a laptop is compared on a CI runner with the same key.

Writes take a file lock, re-read the file, merge, and atomically replace it, so
concurrent writers lose nothing and a crash leaves the old or the new file, never a
torn one. A file that cannot be read is reported, never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
#: how long a writer waits for another to finish before giving up with a message
LOCK_TIMEOUT_S = 60


class BaselineFileError(Exception):
    """The baseline file exists but cannot be used; the message names it and the fix."""


@dataclass(frozen=True)
class Baseline:
    """Figures recorded for one test on one machine."""

    latency_ms: float
    stat: str
    spread: float
    device: str
    threads: int
    torch: str
    python: str
    recorded: str
    peak_memory: dict[str, int] = field(default_factory=dict)
    #: how fast the core probe ran in the recording process (measure.machine_probes.core_probe):
    #: a later process whose core runs it much slower is judged in proportion
    core_probe_us: float | None = None
    #: recorded on a busy machine: the samples taken, and the undisturbed ones it was
    #: recorded from (None, and not in the file, on a quiet machine)
    samples: int | None = None
    undisturbed_samples: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # rounded so re-recording an unchanged figure changes few characters
        data["latency_ms"] = float(f"{self.latency_ms:.4g}")
        data["spread"] = round(self.spread, 3)
        if self.core_probe_us is None:
            del data["core_probe_us"]
        else:
            data["core_probe_us"] = float(f"{self.core_probe_us:.3g}")
        for key in ("samples", "undisturbed_samples"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> Baseline:
        try:
            core = data.get("core_probe_us")
            samples, undisturbed = data.get("samples"), data.get("undisturbed_samples")
            return cls(
                latency_ms=float(data["latency_ms"]),
                stat=str(data["stat"]),
                spread=float(data.get("spread", 0.0)),
                device=str(data["device"]),
                threads=int(data["threads"]),
                torch=str(data.get("torch", "?")),
                python=str(data.get("python", "?")),
                recorded=str(data.get("recorded", "?")),
                peak_memory={str(k): int(v) for k, v in dict(data.get("peak_memory", {})).items()},
                core_probe_us=None if core is None else float(core),
                samples=None if samples is None else int(samples),
                undisturbed_samples=None if undisturbed is None else int(undisturbed),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc!r})") from None


@dataclass(frozen=True)
class InstructionBaseline:
    """An instruction count recorded for one test under one key (see ``instruction_checks``)."""

    instructions: int
    spread: float
    repeats: int
    recorded: str
    #: the functions that counted most, with their own counts per call
    functions: dict[str, int] = field(default_factory=dict)
    #: of ``instructions``, those the Python interpreter's own functions counted
    interpreter: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["spread"] = float(f"{self.spread:.2g}")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> InstructionBaseline:
        try:
            return cls(
                instructions=int(data["instructions"]),
                spread=float(data.get("spread", 0.0)),
                repeats=int(data.get("repeats", 0)),
                recorded=str(data.get("recorded", "?")),
                functions={str(k): int(v) for k, v in dict(data.get("functions", {})).items()},
                interpreter=int(data.get("interpreter", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc!r})") from None


def _fix_hint(path: Path) -> str:
    return (
        f"Fix or restore it from version control (git checkout -- {path.name}), or delete"
        f" it and re-record with: pytest --torch-update-perf"
    )


class BaselineFile:
    """Reads and merges the baseline file at ``path``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._cached: dict[str, dict[str, Baseline]] | None = None
        self._counts: dict[str, dict[str, InstructionBaseline]] | None = None

    def read(self) -> dict[str, dict[str, Baseline]]:
        """Fingerprint key -> test key -> Baseline; empty when the file does not exist."""
        return self.read_all()[0]

    def read_all(
        self,
    ) -> tuple[dict[str, dict[str, Baseline]], dict[str, dict[str, InstructionBaseline]]]:
        """The wall-clock entries (as :meth:`read`) and the instruction counts (count key
        -> test key -> InstructionBaseline)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, {}
        except OSError as exc:
            raise BaselineFileError(
                f"cannot read the perf baseline file {self.path}: {exc.strerror}."
                f" {_fix_hint(self.path)}"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BaselineFileError(
                f"the perf baseline file {self.path} is not valid JSON (line {exc.lineno},"
                f" column {exc.colno}: {exc.msg}). Nothing was changed. {_fix_hint(self.path)}"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("machines"), dict):
            raise BaselineFileError(
                f"the perf baseline file {self.path} does not have the expected layout"
                f' (an object with "format" and "machines"). Nothing was changed.'
                f" {_fix_hint(self.path)}"
            )
        if data.get("format") != FORMAT:
            raise BaselineFileError(
                f"the perf baseline file {self.path} has format {data.get('format')!r};"
                f" this version of pytest-torch-perf reads format {FORMAT}. Upgrade"
                f" pytest-torch-perf, or re-record with: pytest --torch-update-perf"
            )
        machines: dict[str, dict[str, Baseline]] = {}
        for machine, tests in data["machines"].items():
            if not isinstance(tests, dict):
                raise BaselineFileError(f"{self.path}: machine {machine!r} is malformed")
            machines[machine] = {
                key: Baseline.from_json(entry, f"{self.path}: {key!r}")
                for key, entry in tests.items()
            }
        counts: dict[str, dict[str, InstructionBaseline]] = {}
        sections = data.get("instructions", {})
        if not isinstance(sections, dict):
            raise BaselineFileError(f'{self.path}: "instructions" is malformed')
        for count_key, tests in sections.items():
            if not isinstance(tests, dict):
                raise BaselineFileError(f"{self.path}: instructions {count_key!r} is malformed")
            counts[count_key] = {
                key: InstructionBaseline.from_json(entry, f"{self.path}: {key!r}")
                for key, entry in tests.items()
            }
        return machines, counts

    def lookup(self, machine: str, test: str) -> Baseline | None:
        """One entry; the file is parsed once for all lookups (merge refreshes it)."""
        if self._cached is None:
            self._cached, self._counts = self.read_all()
        return self._cached.get(machine, {}).get(test)

    def counts_of(self, test: str) -> dict[str, InstructionBaseline]:
        """A test's instruction counts under every key it was recorded with."""
        if self._counts is None:
            self._cached, self._counts = self.read_all()
        return {key: tests[test] for key, tests in self._counts.items() if test in tests}

    def merge(
        self,
        updates: Mapping[str, Mapping[str, Baseline]],
        counts: Mapping[str, Mapping[str, InstructionBaseline]] | None = None,
    ) -> None:
        """Add or replace entries (wall-clock ``updates``, instruction ``counts``), keeping
        every other one, under the file lock."""
        from filelock import FileLock, Timeout

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S):
                self._remove_stale_temp_files()
                machines, kept_counts = self.read_all()
                for machine, tests in updates.items():
                    machines.setdefault(machine, {}).update(tests)
                for count_key, entries in (counts or {}).items():
                    kept_counts.setdefault(count_key, {}).update(entries)
                document: dict[str, Any] = {
                    "format": FORMAT,
                    "machines": {
                        machine: {key: entry.to_json() for key, entry in tests.items()}
                        for machine, tests in machines.items()
                    },
                }
                if kept_counts:
                    document["instructions"] = {
                        count_key: {key: entry.to_json() for key, entry in tests.items()}
                        for count_key, tests in kept_counts.items()
                    }
                write_atomically(self.path, json.dumps(document, indent=2, sort_keys=True) + "\n")
                self._cached, self._counts = machines, kept_counts
        except Timeout:
            raise BaselineFileError(
                f"could not record perf baselines in {self.path}: another process has held"
                f" its lock file {self.lock_path} for {LOCK_TIMEOUT_S} s. Nothing was"
                f" changed. If no other pytest is recording, delete the lock file and"
                f" re-run with --torch-update-perf"
            ) from None
        except OSError as exc:
            from pytest_torch.core.paths import unwritable

            reason = unwritable(self.path) or f"{exc.filename or self.path}: {exc.strerror or exc}"
            raise BaselineFileError(
                f"could not record perf baselines in {self.path}: {reason}. Nothing was"
                f" changed. Make the folder writable or point --torch-perf-baselines at a"
                f" writable path, then re-run with --torch-update-perf"
            ) from None

    def _remove_stale_temp_files(self) -> None:
        # temp files are written only under the lock, so any found now are from a
        # writer that was killed mid-write
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def check_writable(self) -> None:
        """Refuse early, before any test runs, when the recordings could not be saved."""
        from pytest_torch.core.paths import unwritable

        problem = unwritable(self.path)
        if problem is not None:
            raise BaselineFileError(
                f"--torch-update-perf would record into {self.path}, but {problem}. Nothing"
                f" was run. Make it writable or point --torch-perf-baselines (ini"
                f" torch_perf_baselines) at a writable file"
            )


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a reader sees the old or the new file, never half."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if path.exists():
            os.chmod(temp, path.stat().st_mode & 0o777)
        else:
            os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
