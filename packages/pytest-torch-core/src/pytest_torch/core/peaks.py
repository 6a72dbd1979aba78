"""Peak memory of a stretch of code, on every device, CPU included.

:class:`PeakTracker` is the one way the family measures peaks: accelerators through
their allocator's peak counter (reset at the start), the CPU through the allocation
events of torch's CPU allocator (:mod:`pytest_torch.core.cpu_memory`). Either way the
result says what was allocated when the window opened, the peak, and what was left
when it closed.

On the CPU, "allocated when the window opened" is the storage of the tensors Python can
see at that moment (gc-tracked tensors, shared storages counted once); blocks freed in
the window that were allocated before it are not credited back, so a CPU peak is never
under-reported.

Trackers nest (a ``perf_baseline`` or ``assert_max_memory`` inside a test with a
memory budget). An accelerator has one peak counter per device, so before a tracker
resets it, every tracker already open on that device keeps the peak seen so far. The
CPU's allocation events come from one recording that open trackers share.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core import devices
from pytest_torch.core.cpu_memory import CpuAllocation, CpuAllocationRecorder
from pytest_torch.core.units import KIB

if TYPE_CHECKING:
    import torch

#: how many of the largest blocks alive at the peak a result keeps
LARGEST_BLOCKS = 5


class Block(NamedTuple):
    """A block of memory alive at the moment of the peak."""

    size: int
    #: milliseconds after the window opened when it was allocated
    allocated_at_ms: float
    #: "tensor [64, 1024] float32" when a live tensor uses it (see PeakTracker.name_blocks)
    tensor: str | None
    freed: bool
    address: int = 0


class PeakMemory(NamedTuple):
    """Memory on one device over a window, in bytes."""

    device: str
    at_start: int
    peak: int
    at_end: int
    #: the largest blocks alive at the peak, where the device's mechanism knows them
    largest: tuple[Block, ...] = ()

    @property
    def added(self) -> int:
        """How much the window added on top of what was allocated when it opened."""
        return max(0, self.peak - self.at_start)


def iter_tensors(objects: Iterable[object] | None = None) -> Iterator[torch.Tensor]:
    """Every tensor among ``objects`` (default: every object the garbage collector tracks)."""
    import torch

    is_tensor: dict[type, bool] = {}
    base = torch.Tensor
    for obj in gc.get_objects() if objects is None else objects:
        kind = type(obj)
        known = is_tensor.get(kind)
        if known is None:  # isinstance on tensor types is slow: decide once per type
            known = is_tensor[kind] = issubclass(kind, base)
        if known:
            yield obj  # type: ignore[misc]


def storage_key(tensor: torch.Tensor) -> tuple[str, int, int] | None:
    """(device, address, bytes) of the tensor's storage; None where it has none.

    Fake tensors (left by torch.compile's tracing) and meta tensors keep their storage
    on the meta device: it holds no memory, and asking its address makes torch warn."""
    try:
        storage = tensor.untyped_storage()
        if storage.device.type == "meta":
            return None
        address = storage.data_ptr()
        if address == 0:
            return None
        return str(tensor.device), address, int(storage.nbytes())
    except Exception:  # sparse, nested, fake or meta tensors own no plain storage
        return None


def live_tensor_bytes(device_type: str) -> tuple[int, dict[int, str]]:
    """Bytes of the storages of live tensors on ``device_type``, and a description of
    the tensor using each storage address."""
    total = 0
    named: dict[int, str] = {}
    for tensor in iter_tensors():
        key = storage_key(tensor)
        if key is None or key[1] in named or not key[0].startswith(device_type):
            continue
        named[key[1]] = describe_tensor(tensor)
        total += key[2]
    return total, named


def describe_tensor(tensor: torch.Tensor) -> str:
    """``tensor [64, 1024] float32``; nested tensors, which have no single shape, by how
    many tensors they hold."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    try:
        if tensor.is_nested:
            return f"nested tensor of {tensor.size(0)} tensors, {dtype}"
        return f"tensor {list(tensor.shape)} {dtype}"
    except Exception:  # a subclass whose sizes cannot be read: still a tensor of this dtype
        return f"tensor {dtype}"


def cpu_peak(
    events: list[CpuAllocation], at_start: int, live_at_end: dict[int, str], device: str = "cpu"
) -> PeakMemory:
    """The peak of a window from the CPU allocator's events and the bytes live at start."""
    if not events:
        return PeakMemory(device, at_start, at_start, at_start)
    running, peak, peak_index = 0, 0, -1
    for index, event in enumerate(events):
        running += event.size
        if running > peak:
            peak, peak_index = running, index
    live: dict[int, CpuAllocation] = {}
    for event in events[: peak_index + 1]:
        if event.size > 0:
            live[event.ptr] = event
        else:
            live.pop(event.ptr, None)
    freed_later = {e.ptr for e in events[peak_index + 1 :] if e.size < 0}
    start_ns = events[0].time_ns
    blocks = tuple(
        Block(
            event.size,
            (event.time_ns - start_ns) / 1e6,
            None if event.ptr in freed_later else live_at_end.get(event.ptr),
            event.ptr in freed_later,
            event.ptr,
        )
        for event in sorted(live.values(), key=lambda e: -e.size)[:LARGEST_BLOCKS]
    )
    return PeakMemory(device, at_start, at_start + peak, at_start + running, blocks)


class _SharedCpuRecording:
    """One recording of the CPU allocator's events for every open tracker: torch's
    profiler runs once per process, so a tracker opened inside another joins its
    recording instead of being refused."""

    def __init__(self) -> None:
        self.recorder: CpuAllocationRecorder | None = None
        self.events: list[CpuAllocation] = []
        self.users = 0

    def _flush(self, restart: bool) -> None:
        assert self.recorder is not None
        self.events.extend(self.recorder.stop())
        if restart and not self.recorder.start():  # someone else's profiler took over
            self.recorder = None

    def join(self) -> int | None:
        """Start or join the recording; the position this tracker's events start at, or
        None when torch's profiler is in use by something else."""
        if self.users == 0:
            recorder = CpuAllocationRecorder()
            if not recorder.start():
                return None
            self.recorder, self.events = recorder, []
        elif self.recorder is None:
            return None
        else:
            self._flush(restart=True)  # events so far belong to the trackers already open
        self.users += 1
        return len(self.events)

    def leave(self, start: int) -> list[CpuAllocation]:
        """This tracker's events (from ``start`` on); stops the recording with the last."""
        self.users -= 1
        if self.recorder is not None:
            self._flush(restart=self.users > 0)
        events = self.events[start:]
        if self.users == 0:
            self.recorder, self.events = None, []
        return events


_CPU_RECORDING = _SharedCpuRecording()
#: trackers between start and stop, whose accelerator peaks a reset must carry over
_OPEN: list[PeakTracker] = []


class PeakTracker:
    """Measures the peak memory on ``devices`` between :meth:`start` and :meth:`stop`.

    ``with PeakTracker(["cpu"]) as peaks: ...`` then ``peaks.results["cpu"].peak``.
    :attr:`results` maps each device (``"cpu"``,
    ``"cuda:0"``, ...) to a :class:`PeakMemory`. A device whose peak cannot be measured
    is left out and its reason kept in :attr:`unmeasured`. The accelerators' peak
    counters are reset at the start (torch offers no way to put a peak back); trackers
    open around this one keep the peak they had seen, so nesting is safe.
    """

    def __init__(self, devices_: Iterable[torch.device | str]) -> None:
        self.devices = [devices.as_device(d) for d in devices_]
        self.results: dict[str, PeakMemory] = {}
        self.unmeasured: dict[str, str] = {}
        self._cpu_from: int | None = None
        self._cpu_start = 0
        self._accelerators: dict[str, tuple[torch.device, int, bool]] = {}
        #: per accelerator: the highest peak seen before another tracker reset the counter
        self._carried: dict[str, int] = {}

    def start(self) -> None:
        self.results, self.unmeasured, self._carried = {}, {}, {}
        _OPEN.append(self)
        try:
            for device in self.devices:
                if device.type == "cpu":
                    self._start_cpu()
                else:
                    self._start_accelerator(device)
        except BaseException:
            self.stop()  # leave no recording running and no tracker registered
            raise

    def _start_cpu(self) -> None:
        self._cpu_start = live_tensor_bytes("cpu")[0]
        self._cpu_from = _CPU_RECORDING.join()
        if self._cpu_from is None:
            self.unmeasured["cpu"] = (
                "torch's profiler was already running, and CPU peaks are recorded with it"
            )

    def _start_accelerator(self, device: torch.device) -> None:
        name = str(device)
        if not devices.is_available(device.type):
            self.unmeasured[name] = f"{device.type} is not available"
            return
        initialized = devices.is_initialized(device.type)
        at_start = 0
        if initialized:
            devices.synchronize(device)
            stats = devices.memory_stats(device)
            if stats is None or stats.peak is None:
                self.unmeasured[name] = f"{device.type} does not report peak memory"
                return
            for outer in _OPEN:  # the reset below ends their view of the peak so far
                if outer is not self and name in outer._accelerators:
                    outer._carried[name] = max(outer._carried.get(name, 0), stats.peak)
            if not devices.reset_peak_memory(device):
                self.unmeasured[name] = f"{device.type} does not report peak memory"
                return
            at_start = stats.allocated
        self._accelerators[name] = (device, at_start, initialized)

    def stop(self) -> dict[str, PeakMemory]:
        if self in _OPEN:
            _OPEN.remove(self)
        if self._cpu_from is not None:
            events = _CPU_RECORDING.leave(self._cpu_from)
            self._cpu_from = None
            self.results["cpu"] = cpu_peak(events, self._cpu_start, {})
        for name, (device, at_start, was_initialized) in self._accelerators.items():
            if not was_initialized and not devices.is_initialized(device.type):
                self.results[name] = PeakMemory(name, 0, 0, 0)  # never touched
                continue
            devices.synchronize(device)
            stats = devices.memory_stats(device)
            if stats is None or stats.peak is None:
                self.unmeasured[name] = f"{device.type} does not report peak memory"
                continue
            peak = max(stats.peak, self._carried.get(name, 0))
            self.results[name] = PeakMemory(name, at_start, peak, stats.allocated)
        self._accelerators, self._carried = {}, {}
        return self.results

    def name_blocks(self) -> None:
        """Say which live tensor uses each of the largest blocks that is still allocated
        (a scan of every object: done on demand, when a report needs it)."""
        peak = self.results.get("cpu")
        if peak is None or not any(not b.freed and b.tensor is None for b in peak.largest):
            return
        described = live_tensor_bytes("cpu")[1]
        self.results["cpu"] = peak._replace(
            largest=tuple(
                b if b.freed else b._replace(tensor=described.get(b.address)) for b in peak.largest
            )
        )

    def __enter__(self) -> PeakTracker:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def format_bytes(count: float) -> str:
    """``"812.4 MiB"``, ``"3.0 KiB"``, ``"12 B"`` (signed when negative)."""
    sign = "-" if count < 0 else ""
    count = abs(count)
    if count < KIB:
        return f"{sign}{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= KIB
        if count < KIB or unit == "GiB":
            break
    return f"{sign}{count:.1f} {unit}"
