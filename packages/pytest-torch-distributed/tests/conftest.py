from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _not_inside_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """When this suite itself runs under xdist or torchrun, an inner run must not take
    itself for one of the outer run's workers or ranks."""
    for name in (
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def rank_pids(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], list[int]]:
    """Inner tests that call ``note_pid()`` (from the inner conftest this writes) leave
    their rank's pid behind; the fixture returns the pids noted so far."""
    folder = tmp_path / "pids"
    folder.mkdir()
    monkeypatch.setenv("RANK_PIDS_DIR", str(folder))
    pytester.makeconftest(PID_NOTES)
    return lambda: sorted({int(p.name) for p in folder.iterdir()})


@pytest.fixture
def still_alive() -> Callable[[list[int]], list[int]]:
    """``still_alive(pids)``: those still running after up to 10 s."""
    return gone


PID_NOTES = """
import os
from pathlib import Path

def note_pid():
    Path(os.environ["RANK_PIDS_DIR"], str(os.getpid())).touch()
"""


def gone(pids: list[int], wait: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to ``wait`` seconds for them to end."""
    deadline = time.monotonic() + wait
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        if alive:
            time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead, waiting for its parent to read its status
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
