"""Checks on the files and folders the plugins write, made before any test runs."""

from __future__ import annotations

import os
from pathlib import Path


def unwritable(path: Path, *, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or a folder with ``folder=True``) cannot be written or
    created; None when it can. Missing parent folders count as creatable when the
    nearest existing one is a writable folder."""
    if path.exists():
        if folder and not path.is_dir():
            return f"{path} exists and is not a folder"
        if not folder and path.is_dir():
            return f"{path} is a folder"
        if not os.access(path, os.W_OK):
            return f"{path} is not writable"
        if folder:
            return None
    parent = path if folder else path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, so {path} cannot be created"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} is not writable"
    return None
