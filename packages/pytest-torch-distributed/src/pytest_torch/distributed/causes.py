"""What a rank's failure says about its cause: a collective broken because a peer had
gone, the message of the C++ exception a rank died of, the line that called the
collective that failed."""

from __future__ import annotations

import re
from typing import Any

import pytest

#: what a rank's collective raises when a peer stopped taking part (it failed, left the
#: collective or died): a consequence of another rank's failure, not a cause
_PEER_GONE = re.compile(
    r"Connection (closed|reset) by peer|failed to pass monitoredBarrier|"
    r"Timed out waiting|communicator was aborted|NCCL error|Broken pipe",
    re.IGNORECASE,
)


def after_peer_left(report: pytest.TestReport) -> bool:
    """Whether a rank's failure is a collective that broke because a peer had gone."""
    return bool(_PEER_GONE.search(str(report.longrepr)))


#: what a C++ exception that ended a process said (std::terminate's message)
_WHAT = re.compile(r"^\s*what\(\):\s*(?:\[enforce fail at [^\]]*\]\s*)?(.+)$")


def last_words(captured: list[str], limit: int = 300) -> str:
    """The message of the C++ exception a rank died of, from what it wrote last."""
    for line in reversed(captured):
        found = _WHAT.match(line)
        if found:
            text = found.group(1).strip()
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return ""


def call_site(longrepr: Any) -> str | None:
    """``test_x.py:12``: the innermost frame of a failure's traceback outside torch (the
    line that called the collective that failed)."""
    chain = getattr(longrepr, "chain", None)
    traceback = chain[-1][0] if chain else getattr(longrepr, "reprtraceback", None)
    for entry in reversed(getattr(traceback, "reprentries", []) or []):
        location = getattr(entry, "reprfileloc", None)
        if location is None:
            continue
        path = str(location.path).replace("\\", "/")
        if "/torch/" not in path and "/_pytest/" not in path:
            return f"{path}:{location.lineno}"
    return None
