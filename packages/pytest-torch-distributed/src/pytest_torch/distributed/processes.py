"""Child processes that cannot outlive their parent, and what their exit means.

A rank is started in a session of its own (so Ctrl-C in the terminal reaches only
pytest, which then stops the ranks, and a rank's own children are stopped with it),
asks the kernel to kill it when pytest dies (Linux), and watches its parent itself
everywhere else. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

#: Linux prctl option: a signal for this process when its parent dies
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when ``parent_pid`` does: the kernel's parent-death
    signal where there is one, and a watcher thread that polls the parent always."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before we asked
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="pytest-torch-parent-watch", daemon=True).start()


def stop(process: subprocess.Popen[bytes], wait: float) -> None:
    """Give a rank up to ``wait`` seconds to exit by itself, then SIGKILL its whole
    session, and reap it. The session is killed while the rank's pid is not reaped yet,
    so that id cannot name another process; a rank reaped earlier is only waited for."""
    if process.returncode is None:
        deadline = time.monotonic() + wait
        while not _exited(process) and time.monotonic() < deadline:
            time.sleep(0.05)
        if process.returncode is None:
            kill_group(process.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, without reaping it where the OS can tell."""
    waitid = getattr(os, "waitid", None)
    if waitid is None:  # macOS: poll() reaps, and stop() then leaves the group alone
        return process.poll() is not None
    try:
        return waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def kill_group(pid: int) -> None:
    """SIGKILL a rank and every process in its session."""
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.kill(pid, signal.SIGKILL)


#: what a rank's own pytest session exits with when it cannot go on, and what its log
#: then holds: the hint is given only where the log shows it (a test's own
#: ``os._exit(3)`` is not an internal error)
_PYTEST_CODES = {
    2: ("KeyboardInterrupt", " (pytest's status for an interrupted session: a KeyboardInterrupt)"),
    3: ("INTERNALERROR", " (pytest's status for an internal error in the rank's session)"),
}


def describe_exit(returncode: int | None, plural: bool = False, log: str = "") -> str:
    """``-9`` -> "was killed by SIGKILL (...)", ``3`` -> "exited with code 3"; ``log``,
    what the rank wrote, tells pytest's own statuses from a test's ``os._exit``."""
    if returncode is None:
        return "are still running" if plural else "is still running"
    if returncode >= 0:
        sign, hint = _PYTEST_CODES.get(returncode, ("", ""))
        return f"exited with code {returncode}{hint if sign and sign in log else ''}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    why = {
        "SIGKILL": " — the kernel's out-of-memory killer is the usual cause (see dmesg)",
        "SIGSEGV": " — a crash in native code",
        "SIGABRT": " — an abort in native code (a failed check in torch or a library)",
        "SIGBUS": " — a crash in native code, often a full /dev/shm",
    }.get(name, "")
    return f"{'were' if plural else 'was'} killed by {name}{why}"


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process used so far, all its threads (Linux; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
