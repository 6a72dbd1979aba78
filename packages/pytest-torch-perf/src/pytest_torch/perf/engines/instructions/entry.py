"""An instruction-count baseline: the count recorded for one test under one key (the
baseline file's ``instructions`` section, keyed by what changes counts: the torch,
Python and Valgrind versions and the CPU kernels torch picks)."""

from __future__ import annotations

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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["spread"] = float(f"{self.spread:.2g}")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> InstructionBaseline:
        try:
            return cls(
                instructions=int(data["instructions"]),
                spread=float(data.get("spread", 0.0)),
                repeats=int(data.get("repeats", 0)),
                recorded=str(data.get("recorded", "?")),
                functions={str(k): int(v) for k, v in dict(data.get("functions", {})).items()},
                interpreter=int(data.get("interpreter", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc!r})") from None
