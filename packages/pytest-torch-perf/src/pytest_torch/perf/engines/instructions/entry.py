"""An instruction-count baseline: the count recorded for one test under one key (the
baseline file's ``instructions`` section, keyed by what changes counts: the torch,
Python and Valgrind versions and the CPU kernels torch picks)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_torch.perf.baselines import BaselineFileError


@dataclass(frozen=True)
class InstructionBaseline:
    """An instruction count recorded for one test under one key (see ``judging``)."""

    instructions: int
    spread: float
    repeats: int
    recorded: str
    #: the functions that counted most, with their own counts per call
    functions: dict[str, int] = field(default_factory=dict)
    #: of ``instructions``, those the Python interpreter's own functions counted
    interpreter: int = 0
    #: of ``instructions``, those glibc's allocator's functions counted
    allocator: int = 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["spread"] = float(f"{self.spread:.2g}")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> InstructionBaseline:
        try:
            entry = cls(
                instructions=_whole(data["instructions"]),
                spread=float(data.get("spread", 0.0)),
                repeats=_whole(data.get("repeats", 0)),
                recorded=str(data.get("recorded", "?")),
                functions={str(k): _whole(v) for k, v in dict(data.get("functions", {})).items()},
                interpreter=_whole(data.get("interpreter", 0)),
                allocator=_whole(data.get("allocator", 0)),
            )
        except KeyError as exc:
            raise BaselineFileError(f"{where}: entry is malformed (no {exc})") from None
        except (AttributeError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc})") from None
        problem = entry._out_of_range()
        if problem is not None:
            raise BaselineFileError(f"{where}: entry is malformed ({problem})")
        return entry

    def _out_of_range(self) -> str | None:
        """What no recording writes: a count that is not positive, parts larger than
        the whole, a negative or endless spread."""
        if self.instructions <= 0:
            return f"instructions must be above 0, got {self.instructions:,}"
        for part in ("interpreter", "allocator"):
            value = getattr(self, part)
            if not 0 <= value <= self.instructions:
                return (
                    f"{part} must be from 0 to the instructions ({self.instructions:,}),"
                    f" got {value:,}"
                )
        if self.interpreter + self.allocator > self.instructions:
            return (
                f"interpreter and allocator add up to more than the instructions"
                f" ({self.interpreter:,} + {self.allocator:,} > {self.instructions:,})"
            )
        if not (math.isfinite(self.spread) and self.spread >= 0):
            return f"spread must be a finite number >= 0, got {self.spread}"
        if self.repeats < 0:
            return f"repeats must be 0 or more, got {self.repeats}"
        negative = next((name for name, count in self.functions.items() if count < 0), None)
        if negative is not None:
            return f"functions: {negative!r} has a negative count ({self.functions[negative]:,})"
        return None


def _whole(value: Any) -> int:
    """A count as written: a whole number (1.5, true or "7" are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"a whole number expected, got {value!r}")
    return value
