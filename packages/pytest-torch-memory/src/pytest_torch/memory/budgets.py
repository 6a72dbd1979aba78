"""Peak-memory budgets: the ``torch_max_memory`` marker's arguments and the verdict.

Works on measurements handed in (:class:`~pytest_torch.core.peaks.PeakMemory`), so it
is tested with made-up numbers; the plugin does the measuring.
"""

from __future__ import annotations

import gc
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pytest_torch.core.devices import DeviceSpecError, parse_device_types
from pytest_torch.core.peaks import PeakMemory, format_bytes
from pytest_torch.core.units import MIB
from pytest_torch.memory.leak_parameters import ArgumentTypeError
from pytest_torch.memory.markers import BUDGET

MARKER = BUDGET.name


class MemoryBudgetError(AssertionError):
    """A test's peak memory went over its ``torch_max_memory`` budget."""


class MemoryBudget(NamedTuple):
    mb: float
    #: device types the budget applies to; None for every measured device
    device_types: tuple[str, ...] | None = None

    def applies_to(self, device: str) -> bool:
        return self.device_types is None or device.split(":")[0] in self.device_types


def free_garbage_before(budget: MemoryBudget | None) -> None:
    """Run the garbage collector before a window a budget judges.

    Tensors that earlier code dropped but left in reference cycles stay allocated until
    the collector runs. They would count as allocated when the window opened, on the CPU
    and on an accelerator alike, and the CPU figures never credit them back when they are
    freed inside the window: one test's garbage could push a later test over its budget,
    depending on the order. A full collection costs about 0.1 s with torch imported, so
    only budgeted windows pay it (``--torch-memory-report`` alone measures without it).
    """
    if budget is not None:
        gc.collect()


#: a budget above this (8 EiB) is not a size any device has
MAX_MB = 2**43


def parse_budget(
    args: Sequence[Any], kwargs: Mapping[str, Any], where: str, marker: bool = True
) -> MemoryBudget:
    """The budget of a ``torch_max_memory`` marker (or, with ``marker=False``, of
    ``assert_max_memory``); ValueError naming ``where`` (ArgumentTypeError, also a
    TypeError, for an argument of the wrong type)."""
    shown = BUDGET.example if marker else f"{where}(step, mb=512, device='cuda')"
    prefix = f"{where}: @pytest.mark.{MARKER}" if marker else where
    example = f"Example: {shown}"
    bound = BUDGET.bind(args, kwargs, prefix, example=shown)
    mb = bound["mb"]
    expected = "a finite number of MiB > 0 such as 512"
    if isinstance(mb, bool) or not isinstance(mb, numbers.Real):
        hint = " (a bool is not a size)" if isinstance(mb, bool) else ""
        raise ArgumentTypeError(
            f"{prefix} needs a positive budget in MiB, got {mb!r}{hint}; expected {expected}."
            f" {example}"
        )
    if not 0 < float(mb) <= MAX_MB:  # also false for NaN
        raise ValueError(
            f"{prefix} needs a positive budget in MiB, got {mb!r}; expected {expected}"
            f" (at most 2**43 MiB, 8 EiB). {example}"
        )
    device = bound["device"]
    types: tuple[str, ...] | None = None
    if device is not None:
        if not isinstance(device, (str, list, tuple)):
            raise ArgumentTypeError(
                f"{prefix} device= takes a device type such as"
                f" 'cuda' or a list of them, got {device!r}. {example}"
            )
        try:
            parsed = parse_device_types(device, source=f"{prefix} device=")
        except DeviceSpecError as exc:
            raise ValueError(str(exc)) from None
        types = None if parsed is None else tuple(parsed)
    return MemoryBudget(float(mb), types)


def _block_line(block: Any) -> str:
    when = f"allocated {block.allocated_at_ms:.1f} ms into the test body"
    if block.freed:
        fate = "freed before the body ended"
    elif block.tensor is not None:
        fate = f"still used by a {block.tensor}"
    else:
        fate = "still allocated at the end"
    return f"      {format_bytes(block.size):>10}  {when}, {fate}"


def over_budget(peak: PeakMemory, budget: MemoryBudget) -> bool:
    return budget.applies_to(peak.device) and peak.peak > budget.mb * MIB


def budget_failure(
    results: Mapping[str, PeakMemory], budget: MemoryBudget, unmeasured: Mapping[str, str]
) -> str | None:
    """The failure message when a measured device went over the budget, else None."""
    over = [peak for peak in results.values() if over_budget(peak, budget)]
    if not over:
        return None
    limit = budget.mb * MIB
    lines = []
    for peak in over:
        excess = peak.peak - limit
        lines += [
            f"peak memory on {peak.device} was {format_bytes(peak.peak)}, over the"
            f" torch_max_memory budget of {budget.mb:g} MiB by {format_bytes(excess)}"
            f" (+{100 * excess / limit:.1f} %)",
            f"  already allocated when the test body started: {format_bytes(peak.at_start)}"
            + ("  (live tensors: fixtures, weights, inputs)" if peak.device == "cpu" else ""),
            f"  added by the test body at its peak:            {format_bytes(peak.added)}",
        ]
        if peak.largest:
            lines.append("  largest blocks alive at the peak:")
            lines += [_block_line(block) for block in peak.largest]
    needed = max(math.ceil(peak.peak / MIB) for peak in over)
    lines.append(
        "What to do: cut what the body holds at once (smaller batches; torch.inference_mode()"
        " for inference; drop intermediate tensors you no longer need), or, if this peak is"
        f" expected, raise the budget: @pytest.mark.torch_max_memory(mb={needed})"
    )
    for device, reason in sorted(unmeasured.items()):
        lines.append(f"(not measured on {device}: {reason})")
    return "\n".join(lines)
