"""A sync found, for a person: where the user's code performed it, why it makes the host
wait on a GPU, the sync-free spelling, and the failure message that lists them."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_torch.core.sites import shown_path
from pytest_torch.perf.syncs.rules import OPERATIONS

#: advice that depends on the call that led to the sync, by (operation, callee's last name)
_ADVICE_BY_CAUSE: dict[tuple[str, str], str] = {
    ("item", "tensor"): "torch.stack([...]) of the tensors keeps them on the device",
    ("to(device)", "tensor"): "torch.full/zeros/arange(..., device=x.device) creates it on the"
    " device; keep constants in a registered buffer",
    ("item", "one_hot"): "pass num_classes=: without it the maximum is read on the host",
    ("to(cpu)", "ctc_loss"): "give input_lengths and target_lengths as Python lists or host"
    " tensors (they are used on the host)",
    ("masked_select", "cross_entropy"): "reduction='sum' divided by weight[target].sum() (or"
    " label_smoothing=0 with class weights) keeps the normalisation on the device",
}


@dataclass(frozen=True)
class SyncEvent:
    """One synchronising operation, where the user's code performed it."""

    operation: str
    filename: str
    lineno: int
    source: str
    #: device type of the tensor it ran on ("" when unknown)
    device: str = ""
    #: the call on the user's line that led to it ("torch.multinomial"), "" when direct
    cause: str = ""
    #: how many times it happened at this place in one call
    count: int = 1
    #: True when the CUDA backend's own sync check fired for it as well
    confirmed: bool = False
    #: the installed library's line that did it, below the user's line ("" when none)
    via: str = ""

    def title(self) -> str:
        """``torch.multinomial → multinomial`` or ``F.one_hot → item``."""
        if not self.cause:
            return self.operation
        return f"{self.cause} → {self.operation}"

    def describe(self) -> str:
        where = f"{shown_path(self.filename)}:{self.lineno}"
        code = f"  {self.source}" if self.source else ""
        on = f" [{self.device}]" if self.device else ""
        times = f" (x{self.count})" if self.count > 1 else ""
        via = f" (in {self.via})" if self.via else ""
        return f"{self.title()}{on} at {where}{via}{times}{code}"

    def why(self) -> str:
        """Why it makes the host wait on a GPU."""
        return OPERATIONS[self.operation].why if self.operation in OPERATIONS else ""

    def instead(self) -> str:
        """The sync-free spelling, "" when there is none."""
        key = (self.operation, self.cause.rsplit(".", 1)[-1])
        if key in _ADVICE_BY_CAUSE:
            return _ADVICE_BY_CAUSE[key]
        return OPERATIONS[self.operation].instead if self.operation in OPERATIONS else ""


#: what a call is named when it is the sync itself, not a cause of it
_OWN_NAMES = {"to(cpu)": {"to"}, "to(device)": {"to"}, "where(cond)": {"where"}}


def own_name(cause: str, operation: str) -> bool:
    last = cause.rsplit(".", 1)[-1]
    return (
        last == operation
        or last in _OWN_NAMES.get(operation, ())
        or (operation == "nonzero" and last == "argwhere")
    )


def format_failure(events: list[SyncEvent], allowed: set[str]) -> str:
    count = sum(event.count for event in events)
    lines = [
        f"expected no host-device synchronisation, found {count}"
        f" synchronising operation{'s' if count != 1 else ''}:"
    ]
    for event in events:
        lines.append(f"  {event.describe()}")
        if event.why():
            lines.append(f"      on a GPU: {event.why()}")
        if event.instead():
            lines.append(f"      instead: {event.instead()}")
    if any(event.device == "cpu" for event in events):
        lines.append(
            "Those marked [cpu] ran on the CPU, where they cost nothing extra; on a GPU"
            " each would make the host wait for the device."
        )
    names = tuple(dict.fromkeys(e.operation for e in events))
    lines.append(f"To accept a known one: allow={names!r}.")
    if allowed:
        lines.append(f"(allowed: {', '.join(sorted(allowed))})")
    return "\n".join(lines)
