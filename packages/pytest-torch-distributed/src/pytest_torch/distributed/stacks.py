"""Reading a rank's stack from a ``faulthandler`` dump, and naming the collective it
waits in.

A rank registers ``faulthandler`` on SIGUSR1 with a file of its own; when a test hangs
the controller signals every rank and reads the dumps, so each rank's Python stack at
that moment is known even while its main thread waits inside a C++ collective.
Nothing here imports torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
#: frames of the test runner itself, left out of what a person reads
_MACHINERY = (
    "/_pytest/",
    "/pluggy/",
    "/pytest_torch/distributed/",
    "<frozen ",
    "/runpy.py",
    "<string>",
)
_COLLECTIVES = ("/torch/distributed/distributed_c10d.py",)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def shown(self) -> str:
        """``test_x.py:12 in test_sum``: relative to the working folder where it is in it."""
        return f"{_short(self.file)}:{self.line} in {self.func}"


def _short(path: str) -> str:
    here = os.getcwd().rstrip(os.sep) + os.sep
    return path[len(here) :] if path.startswith(here) else path


def parse_dump(text: str) -> dict[int, list[Frame]]:
    """Thread id -> its frames, outermost first, from one ``faulthandler`` dump; the
    thread the dump was written from (a crash's) is also under id 0."""
    threads: dict[int, list[Frame]] = {}
    current: list[Frame] | None = None
    for line in text.splitlines():
        head = _THREAD.match(line)
        if head:
            current = threads.setdefault(int(head.group(1), 16), [])
            if line.startswith("Current thread"):
                threads[0] = current
            continue
        frame = _FRAME.match(line)
        if frame and current is not None:
            current.append(Frame(frame["file"], int(frame["line"]), frame["func"]))
    # faulthandler lists the most recent call first (a list under two ids is one list)
    for frames in {id(frames): frames for frames in threads.values()}.values():
        frames.reverse()
    return threads


def main_stack(text: str, main_thread: int) -> list[Frame]:
    """The main thread's frames (the one running the test), outermost first."""
    return _main_of(parse_dump(text), main_thread)


def _main_of(threads: dict[int, list[Frame]], main_thread: int) -> list[Frame]:
    if main_thread in threads:
        return threads[main_thread]
    return max(threads.values(), key=len, default=[])


def collective(frames: list[Frame]) -> str | None:
    """``"all_reduce, called at test_x.py:12 in test_sum"`` when the innermost torch
    frame is a public collective of ``torch.distributed``, else None."""
    name = None
    for frame in reversed(frames):
        if frame.file.replace("\\", "/").endswith(_COLLECTIVES) and not frame.func.startswith("_"):
            name = frame.func
            break
    if name is None:
        return None
    caller = next((f for f in reversed(frames) if _is_user(f)), None)
    return name if caller is None else f"{name}, called at {caller.shown()}"


def _is_user(frame: Frame) -> bool:
    path = frame.file.replace("\\", "/")
    return "/torch/" not in path and not any(part in path for part in _MACHINERY)


def innermost_user_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the test's own code (not torch, not the runner)."""
    return next((f for f in reversed(frames) if _is_user(f)), None)


def shown_stack(frames: list[Frame], limit: int = 12) -> list[str]:
    """The frames a person reads, outermost first: from the first frame of user code
    on (the runner's own frames dropped), at most ``limit`` of the innermost."""
    kept = [f for f in frames if not any(part in f.file.replace("\\", "/") for part in _MACHINERY)]
    first_user = next((i for i, f in enumerate(kept) if _is_user(f)), 0)
    kept = kept[first_user:]
    lines = [f"  {f.shown()}" for f in kept[-limit:]]
    if len(kept) > limit:
        lines.insert(0, f"  ... {len(kept) - limit} outer frames left out")
    return lines


def crash_report(log: str, main_thread: int = 0) -> list[str]:
    """From a rank's log, the native crash ``faulthandler`` wrote (``Fatal Python
    error: ...``) and the crashing thread's stack as a person reads it, or []. A crash in
    a thread Python does not know (a C++ library's own) has no Python stack: the main
    thread's, where the test was, is shown instead."""
    start = log.rfind("Fatal Python error")
    if start < 0:
        return []
    dump = log[start:]
    threads = parse_dump(dump)
    frames = threads.get(0)
    if frames is not None:
        title = "its Python stack (most recent call last):"
    else:
        frames = _main_of(threads, main_thread)
        title = "it crashed in a native thread; its main thread was here (most recent call last):"
    return [dump.splitlines()[0], title, *shown_stack(frames)]


def read_when_written(path: Path, wait: float) -> str:
    """The dump in ``path`` once it stops growing, waiting at most ``wait`` seconds."""
    import time

    deadline = time.monotonic() + wait
    last = -1
    while time.monotonic() < deadline:
        size = path.stat().st_size if path.exists() else 0
        if size and size == last:
            break
        last = size
        time.sleep(0.05)
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
