"""The warnings a test raised in its ranks, shown once each in pytest's warnings summary.

A rank sends each warning as text (:class:`~.protocol.RankWarning`); the pytest process
merges the ranks' lists, so a warning raised alike on every rank is one warning naming
the ranks, and records it for the test as pytest's own warnings are recorded. Where the
warning's class cannot be imported here (one defined in a test module), a class of the
same name stands in for it; this module hands such classes out by name (module
``__getattr__``), so pytest-xdist can rebuild them in its controller too.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest

from pytest_torch.distributed import protocol as msg

_STAND_INS: dict[str, type[Warning]] = {}


def __getattr__(name: str) -> type[Warning]:
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _STAND_INS:
        _STAND_INS[name] = type(name, (UserWarning,), {"__module__": __name__})
    return _STAND_INS[name]


def category(module: str, name: str) -> type[Warning]:
    """The warning class, or a stand-in of the same name."""
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
        if isinstance(found, type) and issubclass(found, Warning):
            return found
    except Exception:  # a test module, or a class defined in a function
        pass
    return __getattr__(name.rsplit(".", 1)[-1])


def relay(item: pytest.Item, per_rank: dict[int, tuple[msg.RankWarning, ...]], world: int) -> None:
    """Record the ranks' warnings for ``item`` (merged), as pytest records a test's own."""
    for warning in merged(per_rank, world):
        item.ihook.pytest_warning_recorded.call_historic(
            kwargs={
                "warning_message": warning,
                "when": "runtest",
                "nodeid": item.nodeid,
                "location": None,
            }
        )


def merged(
    per_rank: dict[int, tuple[msg.RankWarning, ...]], world: int
) -> list[warnings.WarningMessage]:
    """One warning for each distinct warning raised in the ranks, in the order first
    raised, its message ending with the ranks that raised it."""
    seen: dict[msg.RankWarning, list[int]] = {}
    for rank in sorted(per_rank):
        for warning in per_rank[rank]:
            ranks = seen.setdefault(warning, [])
            if rank not in ranks:
                ranks.append(rank)
    found = []
    for warning, ranks in seen.items():
        kind = category(warning.category_module, warning.category_name)
        which = ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
        text = f"{warning.message} ({which} of {world})"
        try:
            message = kind(text)
        except Exception:  # a class that takes other arguments
            kind = __getattr__(kind.__name__)
            message = kind(text)
        found.append(warnings.WarningMessage(message, kind, warning.filename, warning.lineno))
    return found
