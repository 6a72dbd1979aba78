"""A wall-clock baseline: the figures recorded for one test on one machine (the
baseline file's ``machines`` section, keyed by the hardware fingerprint)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_torch.perf.baselines import BaselineFileError


@dataclass(frozen=True)
class Baseline:
    """Figures recorded for one test on one machine."""

    latency_ms: float
    stat: str
    spread: float
    device: str
    threads: int
    torch: str
    python: str
    recorded: str
    peak_memory: dict[str, int] = field(default_factory=dict)
    #: how fast the core probe ran in the recording process (machine_probes.core_probe):
    #: a later process whose core runs it much slower is judged in proportion
    core_probe_us: float | None = None
    #: recorded on a busy machine: the samples taken, and the undisturbed ones it was
    #: recorded from (None, and not in the file, on a quiet machine)
    samples: int | None = None
    undisturbed_samples: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # rounded so re-recording an unchanged figure changes few characters
        data["latency_ms"] = float(f"{self.latency_ms:.4g}")
        data["spread"] = round(self.spread, 3)
        if self.core_probe_us is None:
            del data["core_probe_us"]
        else:
            data["core_probe_us"] = float(f"{self.core_probe_us:.3g}")
        for key in ("samples", "undisturbed_samples"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> Baseline:
        try:
            core = data.get("core_probe_us")
            samples, undisturbed = data.get("samples"), data.get("undisturbed_samples")
            return cls(
                latency_ms=float(data["latency_ms"]),
                stat=str(data["stat"]),
                spread=float(data.get("spread", 0.0)),
                device=str(data["device"]),
                threads=int(data["threads"]),
                torch=str(data.get("torch", "?")),
                python=str(data.get("python", "?")),
                recorded=str(data.get("recorded", "?")),
                peak_memory={str(k): int(v) for k, v in dict(data.get("peak_memory", {})).items()},
                core_probe_us=None if core is None else float(core),
                samples=None if samples is None else int(samples),
                undisturbed_samples=None if undisturbed is None else int(undisturbed),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BaselineFileError(f"{where}: entry is malformed ({exc!r})") from None
