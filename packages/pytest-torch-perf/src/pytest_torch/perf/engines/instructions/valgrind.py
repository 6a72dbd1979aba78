"""Running a pytest session under Valgrind, for ``--torch-perf-measure=instructions``.

The run the user started (pytest, not under Valgrind) starts the same pytest command
once more under Callgrind and returns its exit status: one Valgrind process for the
session, and one per xdist worker (Valgrind follows the workers it starts), never one
per test. Callgrind starts with instrumentation and counting off, so ``import torch``
and the tests' own code run at Valgrind's uninstrumented speed; a check switches both on
around the calls it counts (``counting``).

The session under Valgrind learns where Callgrind writes, and which Valgrind it is, from
:data:`ENV`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_torch.perf.engines.instructions.client_requests import supported
from pytest_torch.perf.options import MEASURE

#: set for the session under Valgrind: "<valgrind version>:<folder of Callgrind's files>"
ENV = "PYTEST_TORCH_CALLGRIND"
INSTALL_HINT = (
    "install it from the OS packages: apt-get install valgrind (Debian, Ubuntu),"
    " dnf install valgrind (Fedora, RHEL), apk add valgrind (Alpine)"
)
#: programs a session starts that are never counted, so Valgrind does not follow them
#: (a compiler that torch.compile runs would take minutes under it)
_NOT_FOLLOWED = (
    "*gcc*", "*g++*", "*/cc", "*/c++", "*/cc1*", "*/as", "*/ld", "*/ld.*", "*collect2",
    "*clang*", "*/git", "*/nvidia-smi", "*/lscpu", "*/uname", "*/ldconfig", "*/sh",
    "*/bash", "*/openssl",
)  # fmt: skip
#: Python children that are never counted, by an argument: torch.compile's check that its
#: vectorised code loads (``cdll.LoadLibrary`` in a child Python, under a 60 s timeout)
#: takes seconds natively but a minute under Valgrind on a loaded machine, and when it
#: times out torch.compile builds without the vector headers' macros and fails
_NOT_FOLLOWED_BY_ARG = ("*cdll.LoadLibrary*",)


def valgrind_executable() -> str | None:
    return shutil.which("valgrind")


def unavailable() -> str | None:
    """Why instruction counts cannot be taken on this machine, or None."""
    problem = supported()
    if problem is not None:
        return f"instruction counts need Valgrind on x86-64 Linux, and {problem}"
    if valgrind_executable() is None:
        return f"instruction counts are taken with Valgrind, which is not installed: {INSTALL_HINT}"
    return None


def valgrind_version(executable: str) -> str:
    """``3.19.0`` from ``valgrind --version`` (``valgrind-3.19.0``)."""
    try:
        text = subprocess.run(
            [executable, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else "unknown"


def session() -> tuple[str, Path] | None:
    """In the session under Valgrind: (the Valgrind version, the folder Callgrind writes
    into); None elsewhere."""
    value = os.environ.get(ENV)
    if not value:
        return None
    version, _, folder = value.partition(":")
    return version, Path(folder)


def session_header() -> str:
    found = session()
    version = found[0] if found is not None else "?"
    return (
        f"torch perf: counting instructions under Valgrind {version} (Callgrind), 1 intra-op"
        f" thread ({MEASURE}=instructions); latency budgets are not judged here"
    )


def command(executable: str, folder: Path, pytest_args: list[str]) -> list[str]:
    """The command that runs ``pytest_args`` under Callgrind, writing into ``folder``."""
    return [
        executable,
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        "--dump-line=no",
        "--vgdb=no",
        "--trace-children=yes",
        f"--trace-children-skip={','.join(_NOT_FOLLOWED)}",
        f"--trace-children-skip-by-arg={','.join(_NOT_FOLLOWED_BY_ARG)}",
        f"--callgrind-out-file={folder}/callgrind.%p",
        f"--log-file={folder}/valgrind.%p.log",
        sys.executable,
        "-m",
        "pytest",
        *pytest_args,
    ]


def child_environment(version: str, folder: Path) -> dict[str, str]:
    """The session's environment under Valgrind: where to find Callgrind's files, one
    OpenMP thread and hash seed 0 unless the user set them (Valgrind runs one thread at a
    time, so more only wait), and no GPU (counts see no GPU work, and drivers do not run under
    Valgrind)."""
    env = dict(os.environ)
    env[ENV] = f"{version}:{folder}"
    env.setdefault("OMP_NUM_THREADS", "1")
    # string hashes seeded per process move dictionary probes, and so counts, between runs
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["HIP_VISIBLE_DEVICES"] = ""
    # torch.compile builds its kernels with -march=native, and its cache may hold kernels
    # built natively: on an AVX-512 CPU both are code Valgrind cannot run. Sessions under
    # Valgrind compile for x86-64-v3 (AVX2, what torch's own kernels use under Valgrind)
    # into a cache of their own (``use_inductor_cache``), and without precompiled
    # headers, which torch keeps in one folder per user that no setting moves
    env.setdefault("TORCHINDUCTOR_CPP_MARCH", "x86-64-v3")
    env.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")
    env["TRITON_CACHE_DIR"] = str(folder / "triton")
    return env


#: the folder of pytest's cache (``config.cache``) where sessions under Valgrind keep
#: torch.compile's kernels between runs: compiling under Valgrind takes 10x as long
INDUCTOR_CACHE = "torch-perf-inductor"


def use_inductor_cache(config: pytest.Config) -> None:
    """In the session under Valgrind, once pytest's cache is set up: torch.compile's
    cache in the project's pytest cache (kernels built for x86-64-v3, kept between runs,
    emptied by ``--cache-clear``), undone at the end. Without pytest's cache
    (``-p no:cacheprovider``) it stays in the session's own folder, removed after it."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache.mkdir(INDUCTOR_CACHE))

    def restore() -> None:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before

    config.add_cleanup(restore)


#: signals that stop the run started by hand, and with it the session under Valgrind
#: (SIGINT is the session's own: it gets it from the terminal and ends its way)
_STOPPING = (signal.SIGTERM, signal.SIGHUP)
#: how long the stopped session's processes have to end before they are killed
STOP_GRACE_S = 10.0


def run_session(pytest_args: list[str], cwd: Path) -> int:
    """Run ``pytest pytest_args`` in ``cwd`` under Callgrind; its exit status. Valgrind's
    own messages are shown when the session did not end as pytest ends, or with an
    internal error (an xdist worker that crashed under Valgrind says why there). SIGTERM or
    SIGHUP to this process (``timeout``, a cancelled CI job) stops the session and every
    process under it before it records anything, removes Callgrind's folder, and ends
    with 128 + the signal's number."""
    executable = valgrind_executable()
    assert executable is not None  # checked before (``unavailable``)
    version = valgrind_version(executable)
    folder = Path(tempfile.mkdtemp(prefix="pytest-torch-callgrind-"))
    stopped: list[int] = []
    previous: dict[int, Any] = {}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        process = subprocess.Popen(
            command(executable, folder, pytest_args),
            cwd=cwd,
            env=child_environment(version, folder),
        )

        def stop(signum: int, frame: object) -> None:
            stopped.append(signum)
            raise _Stopping

        if threading.current_thread() is threading.main_thread():
            for signum in _STOPPING:
                previous[signum] = signal.signal(signum, stop)
        code = _wait(process)
        if stopped:
            name = signal.Signals(stopped[0]).name
            print(
                f"\ntorch perf: {name}: the session under Valgrind was stopped; nothing was"
                " recorded.",
                file=sys.stderr,
            )
            return 128 + stopped[0]
        if code < 0 or code > 5 or code == pytest.ExitCode.INTERNAL_ERROR:
            _show_valgrind_log(folder, code)
        return code if code >= 0 else 128 - code
    finally:
        for stopping, handler in previous.items():
            signal.signal(stopping, handler)
        shutil.rmtree(folder, ignore_errors=True)


class _Stopping(Exception):
    """Raised by the handler of a stopping signal, out of the wait for the session."""


def _wait(process: subprocess.Popen[bytes]) -> int:
    """The session's exit status. Once a stopping signal came, the session and every
    process under it get SIGTERM, and those still there after :data:`STOP_GRACE_S`
    (a test that handles SIGTERM) SIGKILL."""
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:  # the session got it too: let it end its way
            continue
        except _Stopping:
            break
    tree = [process.pid, *_descendants(process.pid)]  # before orphans lose their parent
    _signal_all(tree, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        with contextlib.suppress(_Stopping, KeyboardInterrupt):
            process.poll()
            if not [pid for pid in tree[1:] if _alive(pid)] and process.returncode is not None:
                return process.returncode
            time.sleep(0.1)
    _signal_all([pid for pid in tree if _alive(pid)], signal.SIGKILL)
    return process.wait()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie that nobody reaped has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid``, parents before their children (from /proc: counts
    run on Linux only)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            fields = stat.read_text().rpartition(")")[2].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


#: what every Valgrind log says, which tells nothing about why a session ended
_ROUTINE = re.compile(
    r"==\d+== ($|Callgrind, |Copyright |Using Valgrind|Command: |Parent PID: |Using source"
    r"|For interactive|Events +:|Collected +:|I +refs:)"
)


def threaded_from_now_on() -> Callable[[], None]:
    """Start a thread that only waits, and return what ends it. glibc's allocator takes
    shorter paths (no locks) while a process has never had a second thread, and keeps
    the longer ones once it has: a serial session would count a small model's allocations
    7 % cheaper than an xdist worker (which has execnet's thread) or a session in which a
    test started a DataLoader, so every counting process has a second thread from the
    start."""
    stop = threading.Event()
    threading.Thread(target=stop.wait, name="pytest-torch-threaded", daemon=True).start()
    return stop.set


def _show_valgrind_log(folder: Path, code: int) -> None:
    cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    print(f"\ntorch perf: the session under Valgrind ended with {cause}.", file=sys.stderr)
    for log in sorted(folder.glob("valgrind.*.log")):
        lines = log.read_text(errors="replace").splitlines()
        telling = [line for line in lines if not _ROUTINE.match(line)]
        if telling:
            print(f"Valgrind's messages ({log.name}):", file=sys.stderr)
            print("\n".join(telling[-40:]), file=sys.stderr)
            if any("unrecognised instruction" in line.lower() for line in telling):
                print(
                    "  (Valgrind runs AVX2 code but not AVX-512: code built for this CPU's"
                    " AVX-512, outside torch's own kernels, cannot be counted)",
                    file=sys.stderr,
                )
