"""Files replaced atomically: a reader sees the old file or the new one, never half.

The new content goes to a temporary file beside the target (``.{name}.<random>.tmp``,
on the same file system, so the final rename is atomic), is flushed to disk, takes the
target's permissions (``0o644`` for a new file; a temporary file is private), and then
replaces the target with :func:`os.replace`. On any failure the temporary file is
removed and the target is left as it was. Writers that share a file across processes
also hold a lock around their read-merge-write (``filelock``); this module only makes
the write itself safe.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: permissions of a file that did not exist before (a temporary file starts as 0o600)
NEW_FILE_MODE = 0o644


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that writes files itself
    (``torch.save``, ``Figure.savefig``); when the ``with`` block ends without an error,
    the file written there is flushed to disk and replaces ``path``.

    The temporary file exists (empty) when the block starts. On an error it is removed
    and ``path`` is untouched.
    """
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        with open(temporary, "rb+") as written:  # fsync needs a handle that may write
            os.fsync(written.fileno())
        _replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_atomically(path: Path, text: str | bytes) -> None:
    """Replace ``path`` with ``text`` (UTF-8) or bytes: a reader sees the old or the new
    file, never half."""
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text.encode("utf-8") if isinstance(text, str) else text)
            out.flush()
            os.fsync(out.fileno())
        _replace(Path(name), path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


def _replace(temporary: Path, path: Path) -> None:
    """Give ``temporary`` the target's permissions, then rename it over the target."""
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    os.chmod(temporary, mode)
    os.replace(temporary, path)
