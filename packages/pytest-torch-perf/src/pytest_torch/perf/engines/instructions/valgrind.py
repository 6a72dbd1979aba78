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

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

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
    # into a cache of their own, kept between runs: compiling under Valgrind takes 10x
    # as long as natively
    env.setdefault("TORCHINDUCTOR_CPP_MARCH", "x86-64-v3")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache())
    env["TRITON_CACHE_DIR"] = str(folder / "triton")
    return env


def inductor_cache() -> Path:
    """torch.compile's cache for sessions under Valgrind (kernels built for x86-64-v3)."""
    user = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"pytest-torch-valgrind-inductor-{user}"


def run_session(pytest_args: list[str], cwd: Path) -> int:
    """Run ``pytest pytest_args`` in ``cwd`` under Callgrind; its exit status. Valgrind's
    own messages are shown only when the session did not end as pytest ends."""
    executable = valgrind_executable()
    assert executable is not None  # checked before (``unavailable``)
    version = valgrind_version(executable)
    folder = Path(tempfile.mkdtemp(prefix="pytest-torch-callgrind-"))
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        process = subprocess.Popen(
            command(executable, folder, pytest_args),
            cwd=cwd,
            env=child_environment(version, folder),
        )
        while True:
            try:
                code = process.wait()
                break
            except KeyboardInterrupt:  # the session got it too: let it end its way
                continue
        if code < 0 or code > 5:
            _show_valgrind_log(folder, code)
        return code if code >= 0 else 128 - code
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
    import threading

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
