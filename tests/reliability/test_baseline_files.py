"""The perf baseline file under concurrent writers, killed writers and bad contents."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_torch.perf.baselines import BaselineFile, BaselineFileError
from pytest_torch.perf.engines.wall.entry import Baseline

WRITER = """
import sys, time
from pathlib import Path
from pytest_torch.perf.baselines import BaselineFile
from pytest_torch.perf.engines.wall.entry import Baseline

path, worker, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
while not go.exists():
    time.sleep(0.001)
entry = Baseline(latency_ms=1.0, stat="median", spread=0.0, device="cpu", threads=1,
                 torch="2", python="3", recorded="now")
for number in range(count):
    BaselineFile(path).merge({"machines": {"machine": {f"{worker}-{number}": entry}}})
"""

ENTRY = Baseline(
    latency_ms=1.0,
    stat="median",
    spread=0.0,
    device="cpu",
    threads=1,
    torch="2",
    python="3",
    recorded="now",
)


def _entries(path: Path) -> set[str]:
    return set(json.loads(path.read_text())["machines"].get("machine", {}))


def test_eight_concurrent_writers_lose_nothing(tmp_path):
    """8 processes x 12 entries each, 4 trials: every entry kept, the file valid JSON at
    every moment a reader looks. (Many writes per process rather than many trials: the
    race is between writes, and a process start costs more than a hundred of them.)"""
    writers, per_writer, trials = 8, 12, 4
    for trial in range(trials):
        path = tmp_path / f"trial{trial}" / "baselines.json"
        go = tmp_path / f"go{trial}"
        processes = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(path), f"w{w}", str(per_writer), str(go)]
            )
            for w in range(writers)
        ]
        go.touch()
        reads = 0
        while any(p.poll() is None for p in processes):
            if path.exists():
                json.loads(path.read_text())  # never a torn file
                reads += 1
        assert [p.wait() for p in processes] == [0] * writers
        expected = {f"w{w}-{n}" for w in range(writers) for n in range(per_writer)}
        assert _entries(path) == expected, f"trial {trial}: lost {expected - _entries(path)}"
        assert not list(path.parent.glob(".baselines.json.*.tmp"))


KILLED_WRITER = """
import os, sys, time
from pytest_torch.perf.baselines import BaselineFile
from pytest_torch.perf.engines.wall.entry import Baseline

# a slow disk: the new file is on disk but not yet in place for a while, so that many
# of the random kills land in the middle of a write. With "signal", the writer says when
# it is in the middle of a write and waits there to be killed.
real_fsync, signal_mode, ready = os.fsync, sys.argv[3] == "signal", False
def slow_fsync(fd):
    if signal_mode and ready:
        print("writing", flush=True)
        time.sleep(60)
    time.sleep(0.02)
    real_fsync(fd)
os.fsync = slow_fsync

entry = Baseline(latency_ms=1.0, stat="median", spread=0.0, device="cpu", threads=1,
                 torch="2", python="3", recorded="now")
file, prefix = BaselineFile(sys.argv[1]), sys.argv[2]
file.merge({"machines": {"machine": {f"{prefix}-00000": entry}}})  # imports done, caches warm
print("ready", flush=True)
ready = True
number = 1
while True:
    file.merge({"machines": {"machine": {f"{prefix}-{number:05d}": entry}}})
    number += 1
"""


def test_a_writer_killed_mid_write_leaves_the_old_or_the_new_file(tmp_path):
    """SIGKILL 12 times, at random moments and (every third kill) in the middle of a
    write, whatever the machine's speed: the file always parses and holds every old
    entry plus a gap-free run of new ones; leftovers never block the next writer."""
    path = tmp_path / "baselines.json"
    # a big file, so that a good share of the writer's time is spent writing it
    BaselineFile(path).merge(
        {"machines": {"machine": {f"old-{n:05d}": ENTRY for n in range(3000)}}}
    )
    old = _entries(path)
    rng = random.Random(20261130)
    mid_write = kills = 0
    while kills < 12:
        kills += 1
        in_a_write = kills % 3 == 0
        process = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(path), f"kill{kills}",
             "signal" if in_a_write else "random"],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        if in_a_write:  # blocked in the fsync of the new file, before it replaces the old
            assert process.stdout.readline() == "writing\n"
        else:
            time.sleep(rng.uniform(0.0, 0.15))
        process.send_signal(signal.SIGKILL)
        process.wait()
        mid_write += bool(list(tmp_path.glob(".baselines.json.*.tmp")))
        entries = _entries(path)  # parses: old or new, never torn
        assert old <= entries
        new = sorted(entries - old)
        assert new and new == [f"kill{kills}-{n:05d}" for n in range(len(new))]
        # the next writer is not blocked by the lock or temp file the killed one left
        started = time.perf_counter()
        BaselineFile(path).merge({"machines": {"machine": {"after": ENTRY}}})
        assert time.perf_counter() - started < 10
        assert "after" in _entries(path)
        assert not list(tmp_path.glob(".baselines.json.*.tmp"))
        old = _entries(path)
    assert mid_write >= 4, f"only {mid_write} of {kills} kills landed during a write"


CONTENTS = {
    "corrupt": '{"format": 1, "machines": {',
    "empty": "",
    "a-list": "[1, 2, 3]\n",
    "no-machines": '{"format": 1}\n',
    "malformed-entry": '{"format": 1, "machines": {"m": {"test_x.py::test_x": {"latency_ms": "fast"}}}}\n',
    "future-version": '{"format": 2, "machines": {}}\n',
}
EXPECTED = {
    "corrupt": "is not valid JSON",
    "empty": "is not valid JSON",
    "a-list": "does not have the expected layout",
    "no-machines": "does not have the expected layout",
    "malformed-entry": "entry is malformed",
    "future-version": "has format 2; this version of pytest-torch-perf reads format 1. Nothing"
    " was changed. A newer pytest-torch-perf wrote it: upgrade",
}

PERF_TEST = """
def test_x(perf_baseline):
    perf_baseline(lambda: None)
"""


@pytest.mark.parametrize("update", [False, True], ids=["compare", "update"])
@pytest.mark.parametrize("kind", list(CONTENTS))
def test_unusable_baseline_files_are_named_and_never_overwritten(pytester, kind, update):
    path = pytester.path / ".torch-perf-baselines.json"
    path.write_text(CONTENTS[kind])
    pytester.makepyfile(test_x=PERF_TEST)
    result = pytester.runpytest("-p", "torch_perf", *(["--torch-update-perf"] if update else []))
    output = "\n".join(result.outlines + result.errlines)
    # once, before any test runs, whether the run compares or records
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert str(path) in output and EXPECTED[kind] in output, output
    assert output.count(EXPECTED[kind]) == 1 and "collected" not in output, output
    assert "Traceback (most recent call last)" not in output
    assert path.read_text() == CONTENTS[kind]


def test_a_baseline_folder_that_became_a_file_is_reported_at_the_end(pytester, quiet_machine):
    """Writability is checked before the run; if the folder is replaced during it, the
    recordings are not saved and the message says where and why."""
    pytester.makepyfile(
        test_x="""
        import shutil
        from pathlib import Path

        def test_x(perf_baseline):
            perf_baseline(lambda: None)

        def test_y():
            shutil.rmtree("perf")
            Path("perf").write_text("not a folder any more")
        """
    )
    (pytester.path / "perf").mkdir()
    result = pytester.runpytest(
        "-p",
        "torch_perf",
        "-p",
        "no:randomly",
        "--torch-update-perf",
        "--torch-perf-baselines=perf/b.json",
    )
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "could not record perf baselines in" in output and "perf/b.json" in output, output
    assert "Traceback (most recent call last)" not in output


def test_merge_errors_name_the_path(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    with pytest.raises(
        BaselineFileError, match=r"could not record perf baselines in .*blocker/b.json"
    ):
        BaselineFile(blocker / "b.json").merge({"machines": {"machine": {"x": ENTRY}}})
    assert blocker.read_text() == "a file"


needs_permissions = pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="runs as root, which may write anywhere; the read-only cases need a normal user",
)


@needs_permissions
def test_read_only_working_tree_refuses_to_record_before_running(pytester):
    pytester.makepyfile(test_x=PERF_TEST)
    pytester.path.chmod(0o555)
    try:
        result = pytester.runpytest(
            "-p", "torch_perf", "--torch-update-perf", "-p", "no:cacheprovider"
        )
    finally:
        pytester.path.chmod(0o755)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--torch-update-perf would record into {pytester.path}*not writable*"]
    )


@needs_permissions
def test_read_only_baseline_file_is_not_replaced(pytester):
    path = pytester.path / ".torch-perf-baselines.json"
    path.write_text('{"format": 1, "machines": {}}\n')
    path.chmod(0o444)
    pytester.makepyfile(test_x=PERF_TEST)
    result = pytester.runpytest("-p", "torch_perf", "--torch-update-perf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{path} is not writable*"])
    assert path.read_text() == '{"format": 1, "machines": {}}\n'


@needs_permissions
def test_read_only_artifact_folder_is_refused(pytester):
    folder = pytester.path / "artifacts"
    folder.mkdir(mode=0o555)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "torch_ci", f"--torch-failure-artifacts={folder}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*cannot save failure artifacts in {folder}*not writable*"])
