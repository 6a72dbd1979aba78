"""Commands that run one test again, for reports to print.

A test id is relative to pytest's rootdir, but pytest reads the paths on its command
line from the directory it was started in: with the ini file at the repository root
and pytest started in ``tests/``, ``pytest tests/test_x.py::test_y`` finds no file.
:func:`rerun_command` writes the path as seen from where pytest was started, and keeps
the ``-p`` plugins of a run with plugin autoload off, so the command works pasted into
the same shell.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

import pytest


def nodeid_from_start(config: pytest.Config, nodeid: str) -> str:
    """``nodeid`` with its file part relative to the directory pytest was started in."""
    path, sep, rest = nodeid.partition("::")
    if not path:
        return nodeid
    target = os.path.join(str(config.rootpath), path)
    try:
        shown = os.path.relpath(target, str(config.invocation_params.dir))
    except ValueError:  # another drive on Windows
        shown = target
    return f"{shown.replace(os.sep, '/')}{sep}{rest}"


def _plugins(config: pytest.Config) -> list[str]:
    """The ``-p`` options of the run, where plugin autoload is off (the test's own
    plugins would be missing from a plain ``pytest``)."""
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    args = [str(a) for a in config.invocation_params.args]
    found = []
    for index, arg in enumerate(args):
        if arg == "-p" and index + 1 < len(args):
            found += ["-p", args[index + 1]]
        elif arg.startswith("-p") and len(arg) > 2:
            found += ["-p", arg[2:]]
    return found


def rerun_command(config: pytest.Config, nodeid: str, options: Sequence[str] = ()) -> str:
    """``pytest 'tests/test_x.py::test_y[a b]' OPTIONS``, runnable where pytest was
    started."""
    words = ["pytest", *_plugins(config), nodeid_from_start(config, nodeid), *options]
    return " ".join(shlex.quote(word) for word in words)
