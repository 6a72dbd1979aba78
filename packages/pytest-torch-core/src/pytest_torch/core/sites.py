"""Where the user's code is: the line a report should point at.

The user's frame is the innermost one that is not internal: not torch's, not the
family's (every portion of the ``pytest_torch`` namespace), not the standard library's
(installed packages aside), not pytest's or pluggy's, and not code without a file
(``<string>``). When that frame is an installed library's (site-packages), the user's
own line is further out, and the library's line goes with it as ``via``. The same rule
reads live frames (:func:`site_of`: a host sync, a tensor's creation, the call that
compiled) and recorded stacks (:func:`site_of_stack`: dynamo's graph breaks).
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import FrameType
from typing import Any

_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


@dataclass(frozen=True)
class Site:
    """A line of the user's code."""

    filename: str
    lineno: int
    #: the line, stripped ("" when unknown)
    source: str = ""
    #: the installed library's line below it that did the work, ``lib/mod.py:12``
    #: ("" when none)
    via: str = ""
    #: the function the line is in ("" when unknown); not part of what the site is
    function: str = field(default="", compare=False)

    def describe(self, root: str | None = None) -> str:
        """``train.py:12 in step(): `loss = model(x)```, with ``(in lib/mod.py:3)``
        when an installed library did it; the path relative to ``root`` when below it."""
        path = self.filename
        if root is not None:
            try:
                relative = os.path.relpath(path, root)
                if not relative.startswith(".."):
                    path = relative
            except ValueError:  # another drive on Windows
                pass
        where = f"{path}:{self.lineno}" + (f" in {self.function}()" if self.function else "")
        code = f": `{self.source}`" if self.source else ""
        via = f" (in {self.via})" if self.via else ""
        return f"{where}{code}{via}"


@lru_cache(maxsize=1)
def _internal_dirs() -> tuple[str, ...]:
    """torch's, the family's, pytest's and pluggy's folders, each ending in a separator."""
    import _pytest
    import pluggy
    import torch

    family = sys.modules[__name__.partition(".")[0]]
    dirs = [
        *(os.path.dirname(os.path.abspath(m.__file__ or "")) for m in (torch, _pytest, pluggy)),
        *(os.path.abspath(portion) for portion in family.__path__),
    ]
    return tuple(os.path.join(d, "") for d in dict.fromkeys(dirs))


@lru_cache(maxsize=1)
def _stdlib_dir() -> str:
    return os.path.join(os.path.abspath(sysconfig.get_paths()["stdlib"]), "")


@lru_cache(maxsize=4096)
def is_internal(filename: str) -> bool:
    """torch's code, the family's, the standard library's (logging...), the test
    runner's, or code without a file."""
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    if path.startswith(_internal_dirs()):
        return True
    return path.startswith(_stdlib_dir()) and not is_library(path)


def is_library(filename: str) -> bool:
    """An installed package's code (site-packages), not the user's own."""
    return any(marker in filename for marker in _INSTALLED)


def library_path(filename: str) -> str:
    """``torchmetrics/utilities/data.py`` for a file in site-packages."""
    for marker in _INSTALLED:
        if marker in filename:
            return filename.split(marker, 1)[1]
    return shown_path(filename)


def shown_path(filename: str) -> str:
    """Relative to the working directory when below it, as pytest shows paths."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if relative.startswith("..") else relative


def _outwards(start: FrameType | None) -> Iterator[FrameType]:
    frame = start
    while frame is not None:
        yield frame
        frame = frame.f_back


def user_frame(start: FrameType | None) -> FrameType | None:
    """The innermost frame from ``start`` outwards that is not internal."""
    for frame in _outwards(start):
        if not is_internal(frame.f_code.co_filename):
            return frame
    return None


def own_frame(start: FrameType | None) -> tuple[FrameType, str] | None:
    """The user's own frame from ``start`` outwards, past installed libraries, and the
    library line below it (``via``, "" when none); None when every frame is internal.
    When only libraries are found, the innermost of them, without ``via``."""
    inner = user_frame(start)
    if inner is None:
        return None
    for frame in _outwards(inner):
        name = frame.f_code.co_filename
        if not is_library(name) and not is_internal(name):
            if frame is inner:
                return frame, ""
            return frame, f"{library_path(inner.f_code.co_filename)}:{inner.f_lineno}"
    return inner, ""


def site_at(frame: FrameType, via: str = "") -> Site:
    """The line ``frame`` is executing."""
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(filename, lineno).strip()
    return Site(filename, lineno, source, via, frame.f_code.co_name)


def site_of(start: FrameType | None) -> Site | None:
    """The user's line from ``start`` outwards (see :func:`own_frame`)."""
    found = own_frame(start)
    return None if found is None else site_at(*found)


def site_of_stack(stack: Sequence[Any]) -> Site | None:
    """The user's line in a recorded stack of ``traceback.FrameSummary`` (outermost
    first), by the same rule as :func:`site_of`."""
    frames = [frame for frame in stack if frame.lineno is not None]
    outside = [frame for frame in frames if not is_internal(frame.filename)]
    if not outside:
        return None
    inner = outside[-1]
    own = [frame for frame in outside if not is_library(frame.filename)]
    chosen = own[-1] if own else inner
    via = "" if chosen is inner else f"{library_path(inner.filename)}:{inner.lineno}"
    source = linecache.getline(chosen.filename, chosen.lineno).strip()
    return Site(chosen.filename, chosen.lineno, source, via, str(getattr(chosen, "name", "")))
