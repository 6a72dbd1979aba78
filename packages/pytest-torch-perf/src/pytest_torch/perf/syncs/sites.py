"""Where a sync happened: the user's line (core's finder, :mod:`pytest_torch.core.sites`),
the call running there, and what it asked for.

On Python 3.11+ the exact call expression being executed in a frame comes from the
code object's positions; before that, the whole line is used.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
from functools import lru_cache
from types import CodeType, FrameType

from pytest_torch.core.sites import Site, own_frame, site_at

#: this plugin's own code: the perf package, every sub-package of it
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: a sync with no line of the user's code on the stack
UNKNOWN = Site("<unknown>", 0)


def locate(frame: FrameType | None) -> tuple[Site, ast.Call | None]:
    """The user's line above ``frame`` (and the installed library's line below it that
    did the sync, if any), and the call being executed on it."""
    found = own_frame(frame)
    if found is None:
        return UNKNOWN, None
    return site_at(*found), call_in(found[0])


def caller_frame(start: FrameType | None) -> FrameType | None:
    """The innermost frame outside this package (torch's Python code included)."""
    frame = start
    while frame is not None and (
        os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)
    ):
        frame = frame.f_back
    return frame


@lru_cache(maxsize=4096)
def _expression(code: CodeType, lasti: int) -> str:
    filename = code.co_filename
    if sys.version_info >= (3, 11) and lasti >= 0:
        positions = list(code.co_positions())
        index = lasti // 2
        if index < len(positions):
            first, last, start, end = positions[index]
            if first is not None and last is not None and start is not None and end is not None:
                lines = [linecache.getline(filename, n) for n in range(first, last + 1)]
                if all(lines):
                    if len(lines) == 1:
                        return _as_text(lines[0], start, end)
                    text = lines[0].encode()[start:].decode(errors="replace")
                    middle = "".join(lines[1:-1])
                    tail = lines[-1].encode()[:end].decode(errors="replace")
                    return text + middle + tail
    return ""


def _as_text(line: str, start: int, end: int) -> str:
    return line.encode()[start:end].decode(errors="replace")


def expression(frame: FrameType) -> str:
    """The source of the expression ``frame`` is executing, "" when unknown."""
    return _expression(frame.f_code, frame.f_lasti)


@lru_cache(maxsize=4096)
def parse_call(text: str) -> ast.Call | None:
    """The call in a source fragment, or None."""
    try:
        tree = ast.parse("(\n" + text + "\n)", mode="eval")
    except (SyntaxError, ValueError):
        return None
    node = tree.body
    return node if isinstance(node, ast.Call) else None


def dotted(node: ast.AST) -> str:
    """``torch.nn.functional.one_hot`` for an attribute chain, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def callee(call: ast.Call | None) -> str:
    """The name of what a call calls, "" when it is not a plain name or attribute chain."""
    return dotted(call.func) if call is not None else ""


@lru_cache(maxsize=4096)
def _line_calls(filename: str, lineno: int) -> tuple[ast.Call, ...]:
    line = linecache.getline(filename, lineno).strip()
    for text in (line, line.rstrip(":"), line.split("=", 1)[-1]):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        return tuple(node for node in ast.walk(tree) if isinstance(node, ast.Call))
    return ()


def call_in(frame: FrameType | None) -> ast.Call | None:
    """The call ``frame`` is executing (its own line's only call before Python 3.11)."""
    if frame is None:
        return None
    text = expression(frame)
    if text:
        return parse_call(text)
    calls = [c for c in _line_calls(frame.f_code.co_filename, frame.f_lineno) if callee(c)]
    return calls[0] if len(calls) == 1 else None


def literal_host(node: ast.AST | None) -> bool:
    """True for a source argument that names the host literally: "cpu", torch.device("cpu")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] == "device":
        return bool(node.args) and literal_host(node.args[0])
    return False


def argument(call: ast.Call | None, position: int, keyword: str) -> ast.AST | None:
    """The source node of one argument of a call."""
    if call is None:
        return None
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[position]
    return None
