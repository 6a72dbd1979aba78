"""The baseline file: recorded figures per engine, key and test (the rule that compares
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
      },
      "flops": {                             (--torch-perf-measure=flops)
        "torch=2.13.0": {"<test node id>[::<name>]": {"total": 2097152, "by_op": {...}, ...}}
      }
    }

Each measurement engine (``engines``) owns one section: the wall clock ``machines``
(keyed by the hardware fingerprint), instruction counts ``instructions``, FLOP counts
``flops``; this module reads and writes sections and knows nothing of what is in an
entry: each engine hands in the parser of its entries. Sections this version does not
know are kept as they are.

Instruction counts are keyed by what changes them, not by the machine, so a count
recorded on a laptop is compared on a CI runner with the same key.

Writes take a file lock, re-read the file, merge, and atomically replace it, so
concurrent writers lose nothing and a crash leaves the old or the new file, never a
torn one. A file that cannot be read is reported, never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_torch.core.files import write_atomically
from pytest_torch.core.paths import unwritable
from pytest_torch.perf.options import BASELINES, UPDATE

FORMAT = 1
#: how long a writer waits for another to finish before giving up with a message
LOCK_TIMEOUT_S = 60
#: the wall clock's section, which every file has
REQUIRED = "machines"

#: an engine's entry parser: (the entry's JSON, where it is for an error) -> its entry
Parser = Callable[[Mapping[str, Any], str], Any]
#: section -> key -> test -> entry (an engine's entry type, with ``to_json()``)
Sections = dict[str, dict[str, dict[str, Any]]]


class BaselineFileError(Exception):
    """The baseline file exists but cannot be used; the message names it and the fix."""


def _fix_hint(path: Path, rerecord: str) -> str:
    return (
        f"Fix or restore it from version control (git checkout -- {path.name}), or move"
        f" it aside and re-record: {_move_aside(path)} && {rerecord}"
    )


def _move_aside(path: Path) -> str:
    return f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.old')}"


class BaselineFile:
    """Reads and merges the baseline file at ``path``; ``parsers``: each engine's
    section and the parser of its entries (None: every engine's)."""

    def __init__(
        self,
        path: Path | str,
        parsers: Mapping[str, Parser] | None = None,
        rerecord: str = f"pytest {UPDATE}",
    ) -> None:
        self.path = Path(path)
        #: the command that records this run's baselines, for the messages
        self.rerecord = rerecord
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        if parsers is None:
            from pytest_torch.perf.engines import entry_parsers  # a cycle: engines use files

            parsers = entry_parsers()
        self.parsers = dict(parsers)
        self._cached: Sections | None = None

    def read(self) -> Sections:
        """Every known section (section -> key -> test -> entry), empty when the file
        does not exist; sections this version does not know are left out. Kept for
        :meth:`entries`."""
        self._cached = self._read()[0]
        return self._cached

    def _read(self) -> tuple[Sections, dict[str, Any]]:
        """The known sections parsed, and the unknown ones as they are."""
        data = self._document()
        if data is None:
            return {}, {}
        sections: Sections = {}
        for section, parse in self.parsers.items():
            found = data.get(section, {})
            if not isinstance(found, dict):
                raise BaselineFileError(f"{self.path}: {section!r} is malformed")
            sections[section] = {}
            for key, tests in found.items():
                if not isinstance(tests, dict):
                    raise BaselineFileError(f"{self.path}: {section} {key!r} is malformed")
                sections[section][key] = {
                    test: self._parse(parse, entry, f"{self.path}: {section} {test!r}")
                    for test, entry in tests.items()
                }
        unknown = {k: v for k, v in data.items() if k not in self.parsers and k != "format"}
        return sections, unknown

    def _parse(self, parse: Parser, entry: Any, where: str) -> Any:
        if not isinstance(entry, Mapping):
            raise BaselineFileError(
                f"{where}: entry is malformed (an object expected, got {type(entry).__name__})."
                f" Nothing was changed. {_fix_hint(self.path, self.rerecord)}"
            )
        try:
            return parse(entry, where)
        except BaselineFileError as exc:
            raise BaselineFileError(
                f"{exc}. Nothing was changed. {_fix_hint(self.path, self.rerecord)}"
            ) from None

    def _document(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BaselineFileError(
                f"cannot read the perf baseline file {self.path}: {exc.strerror}."
                f" {_fix_hint(self.path, self.rerecord)}"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            conflict = next(
                (n for n, line in enumerate(text.splitlines(), 1) if line.startswith("<<<<<<<")),
                None,
            )
            if conflict is not None:
                raise BaselineFileError(
                    f"the perf baseline file {self.path} holds an unresolved merge conflict"
                    f" (<<<<<<< at line {conflict}). Nothing was changed. Resolve it: keep the"
                    " entries of both sides (each test's entry from the side whose"
                    " figures you trust) and remove the markers, or take one side"
                    f" (git checkout --ours -- {self.path.name}, or --theirs) and re-record"
                    f" what the other changed: {self.rerecord}"
                ) from None
            raise BaselineFileError(
                f"the perf baseline file {self.path} is not valid JSON (line {exc.lineno},"
                f" column {exc.colno}: {exc.msg}). Nothing was changed."
                f" {_fix_hint(self.path, self.rerecord)}"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get(REQUIRED), dict):
            raise BaselineFileError(
                f"the perf baseline file {self.path} does not have the expected layout"
                f' (an object with "format" and "machines"). Nothing was changed.'
                f" {_fix_hint(self.path, self.rerecord)}"
            )
        found = data.get("format")
        if found != FORMAT:
            newer = isinstance(found, int) and not isinstance(found, bool) and found > FORMAT
            advice = (
                "A newer pytest-torch-perf wrote it: upgrade pytest-torch-perf, or move it"
                if newer
                else "Move it"
            )
            raise BaselineFileError(
                f"the perf baseline file {self.path} has format {found!r}; this version of"
                f" pytest-torch-perf reads format {FORMAT}. Nothing was changed. {advice}"
                f" aside and re-record: {_move_aside(self.path)} && {self.rerecord}"
            )
        return data

    def entries(self, section: str, test: str) -> dict[str, Any]:
        """A test's entries in ``section`` under every key it was recorded with; the file
        is parsed once for all lookups (read and merge refresh it)."""
        sections = self._cached if self._cached is not None else self.read()
        return {
            key: tests[test] for key, tests in sections.get(section, {}).items() if test in tests
        }

    def lookup(self, section: str, key: str, test: str) -> Any:
        """One entry, or None."""
        return self.entries(section, test).get(key)

    def merge(self, updates: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """Add or replace entries (section -> key -> test -> entry), keeping every other
        one, under the file lock."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S):
                self._remove_stale_temp_files()
                sections, unknown = self._read()
                for section, keys in updates.items():
                    for key, tests in keys.items():
                        sections.setdefault(section, {}).setdefault(key, {}).update(tests)
                document: dict[str, Any] = {**unknown, "format": FORMAT, REQUIRED: {}}
                for section, keys in sections.items():
                    if keys or section == REQUIRED:
                        document[section] = {
                            key: {test: entry.to_json() for test, entry in tests.items()}
                            for key, tests in keys.items()
                        }
                write_atomically(self.path, json.dumps(document, indent=2, sort_keys=True) + "\n")
                self._cached = sections
        except Timeout:
            raise BaselineFileError(
                f"could not record perf baselines in {self.path}: another process has held"
                f" its lock file {self.lock_path} for {LOCK_TIMEOUT_S} s. Nothing was"
                f" changed. If no other pytest is recording, delete the lock file and"
                f" re-run with {UPDATE}"
            ) from None
        except OSError as exc:
            reason = unwritable(self.path) or f"{exc.filename or self.path}: {exc.strerror or exc}"
            raise BaselineFileError(
                f"could not record perf baselines in {self.path}: {reason}. Nothing was"
                f" changed. Make the folder writable or point {BASELINES} at a"
                f" writable path, then re-run with {UPDATE}"
            ) from None

    def _remove_stale_temp_files(self) -> None:
        # temp files are written only under the lock, so any found now are from a
        # writer that was killed mid-write
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()

    def check_writable(self) -> None:
        """Refuse early, before any test runs, when the recordings could not be saved."""
        problem = unwritable(self.path)
        if problem is not None:
            raise BaselineFileError(
                f"{UPDATE} would record into {self.path}, but {problem}. Nothing"
                f" was run. Make it writable or point {BASELINES} (ini"
                f" torch_perf_baselines) at a writable file"
            )
