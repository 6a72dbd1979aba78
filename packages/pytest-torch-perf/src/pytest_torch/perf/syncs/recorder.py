"""What one checked call did: where each of its tensors would live on a GPU run, the
syncs it performed (pending until the call ends, then merged into events), and the
CUDA backend's own sync warnings folded into them; and the recorders of the calls
running now, per thread."""

from __future__ import annotations

import ast
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

from pytest_torch.core.sites import Site
from pytest_torch.perf.syncs import sites
from pytest_torch.perf.syncs.events import SyncEvent, own_name


@dataclass
class Pending:
    """A sync as the call performed it, merged into a :class:`SyncEvent` at the end."""

    operation: str
    site: Site
    device: str
    confirmed: bool = False
    #: the call that led to it, when the user's line does not show one
    cause: str = ""
    #: the call being executed on the user's line, when it could be read
    call: ast.Call | None = None


def tensors(values: Iterable[Any], found: list[Any] | None = None) -> list[Any]:
    """The tensors in nested lists, tuples and dicts."""
    Tensor = sys.modules["torch"].Tensor  # imported already: this runs under torch
    found = [] if found is None else found
    for value in values:
        if isinstance(value, Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            tensors(value, found)
        elif isinstance(value, dict):
            tensors(value.values(), found)
    return found


def is_sync_warning(warning: warnings.WarningMessage) -> bool:
    return "synchroniz" in str(warning.message).lower()


@dataclass(eq=False)
class Placements:
    """Where each tensor would live on a GPU run."""

    #: the tensors on the host by design, by id, with a weak reference that proves the id
    #: still names the same tensor (a weak-key dictionary costs twice as much per op)
    host: dict[int, Any] = field(default_factory=dict)
    accelerated: bool = False  # the call runs on an accelerator: physical placement is exact

    def on_device(self, tensor: Any) -> bool:
        kind: str = tensor.device.type
        if kind != "cpu":
            return kind != "meta"
        if self.accelerated:
            return False
        ref = self.host.get(id(tensor))
        return ref is None or ref() is not tensor

    def mark(self, tensor: Any, on_device: bool) -> None:
        if on_device:
            self.host.pop(id(tensor), None)
        elif tensor.device.type == "cpu":
            self.host[id(tensor)] = weakref.ref(tensor)


@dataclass(eq=False)
class Recorder:
    """What one call did: its syncs and its tensors' placements."""

    placements: Placements = field(default_factory=Placements)
    pending: list[Pending] = field(default_factory=list)
    caught: list[warnings.WarningMessage] = field(default_factory=list)
    #: >0 while a wrapped Python-level call runs: what it does inside is judged already
    depth: int = 0
    thread: int = field(default_factory=threading.get_ident)
    #: the CUDA sync debug mode before the call, once CUDA's own check is armed
    cuda_mode: Any = None

    def arm_cuda(self) -> None:
        """Arm CUDA's own sync check ("warn"), once: when the call starts with CUDA
        initialised, or at its first CUDA tensor (never initialising CUDA itself)."""
        import torch

        if self.cuda_mode is None:
            self.cuda_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")

    def add(self, operation: str, frame: FrameType | None, device: str) -> Pending:
        if threading.get_ident() != self.thread:
            # an autograd thread (CUDA backward): the user's line is where the checked
            # call's thread waits, in loss.backward()
            frame = sys._current_frames().get(self.thread, frame)
        site, call = sites.locate(frame)
        record = Pending(operation, site, device, call=call)
        self.pending.append(record)
        return record

    def target(self, spec: Any, node: Any) -> bool | None:
        """Whether a move to ``spec`` lands on the device (True), the host (False) or stays."""
        import torch

        if spec is None:
            return None
        if isinstance(spec, torch.Tensor):
            return self.placements.on_device(spec)
        try:
            device = torch.device(spec)
        except (RuntimeError, TypeError, ValueError):
            return None
        if device.type == "meta":
            return None
        if device.type != "cpu":
            return True
        if self.placements.accelerated:
            return False
        # on a CPU-only run, "cpu" is the device unless the code names the host literally
        return not sites.literal_host(node)

    def run(
        self,
        record: Pending | None,
        frame: FrameType | None,
        cause: str,
        call: Callable[[], Any],
        inside: bool = True,
    ) -> Any:
        """Run ``call`` (``inside``: as a wrapped call, whose own ops are judged already);
        fold the CUDA backend's sync warnings into ``record``."""
        before = len(self.caught)
        self.depth += inside
        try:
            result = call()
        finally:
            self.depth -= inside
        if len(self.caught) != before:
            self.fold(before, record, frame, cause)
        return result

    def fold(
        self, before: int, record: Pending | None, frame: FrameType | None, cause: str
    ) -> None:
        """The sync warnings caught since ``before`` belong to ``record`` (or a new one)."""
        fired = [w for w in self.caught[before:] if is_sync_warning(w)]
        if not fired:
            return
        for warning in fired:
            self.caught.remove(warning)
        if record is None:
            record = self.add("cuda sync", frame, "cuda")
            record.cause = sites.callee(record.call) or cause
        record.confirmed = True

    def events(self) -> list[SyncEvent]:
        merged: dict[tuple[str, str, int, str], SyncEvent] = {}
        for record in self.pending:
            site = record.site
            cause = sites.callee(record.call) or record.cause
            if own_name(cause, record.operation):  # `t.item` for "item": no news
                cause = ""
            key = (record.operation, site.filename, site.lineno, cause)
            if key in merged:
                event = merged[key]
                merged[key] = replace(
                    event, count=event.count + 1, confirmed=event.confirmed or record.confirmed
                )
            else:
                merged[key] = SyncEvent(
                    record.operation,
                    site.filename,
                    site.lineno,
                    site.source,
                    record.device,
                    cause,
                    1,
                    record.confirmed,
                    site.via,
                )
        return list(merged.values())


#: the recorders of the calls running now, per thread, innermost last
ACTIVE: dict[int, list[Recorder]] = {}
LOCK = threading.Lock()


def current() -> Recorder | None:
    """The innermost recorder of this thread's checked calls."""
    stack = ACTIVE.get(threading.get_ident())
    return stack[-1] if stack else None


def innermost(recorder: Recorder) -> bool:
    """Whether no call checked inside ``recorder``'s call is running (any thread: autograd
    runs CUDA backward ops on its own threads)."""
    stack = ACTIVE.get(recorder.thread)
    return stack is not None and len(stack) > 0 and stack[-1] is recorder


def device_type(tensor: Any) -> str:
    return str(tensor.device.type)
