"""A read-write lock per GPU, shared by the xdist workers through files.

Ordinary GPU tests hold their GPU's lock shared, so they run side by side; a
``torch_gpu_exclusive`` test holds it exclusively, so nothing else runs on that GPU
meanwhile. A second "turnstile" lock gives a waiting exclusive test priority: new
shared holders queue behind it instead of starving it. POSIX ``flock`` provides both
modes; where it is missing (Windows) every GPU test takes the lock exclusively, which
is correct but serial.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


class GpuLock:
    """The lock of one GPU, in ``directory`` (the session's shared temporary folder)."""

    def __init__(self, directory: Path, kind: str, index: int) -> None:
        self.path = directory / f"{kind}{index}.lock"
        self.turnstile = directory / f"{kind}{index}.turnstile"

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if fcntl is None:
            with self.exclusive():
                yield
            return
        with _flocked(self.turnstile, fcntl.LOCK_EX):
            pass  # wait while an exclusive test is queued or running
        with _flocked(self.path, fcntl.LOCK_SH):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if fcntl is None:
            from filelock import FileLock

            with FileLock(str(self.path) + ".filelock"):
                yield
            return
        with _flocked(self.turnstile, fcntl.LOCK_EX), _flocked(self.path, fcntl.LOCK_EX):
            yield


@contextlib.contextmanager
def _flocked(path: Path, mode: int) -> Iterator[None]:
    assert fcntl is not None
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, mode)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)
