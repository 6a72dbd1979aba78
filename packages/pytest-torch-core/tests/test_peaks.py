"""Peak memory through the device layer: the CPU tracker's accuracy and its clean-up."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pytest_torch.core import cpu_memory, devices
from pytest_torch.core.cpu_memory import CpuAllocation
from pytest_torch.core.peaks import Block, PeakMemory, PeakTracker, cpu_peak, format_bytes

MIB = 2**20


def _profiler_on() -> bool:
    return bool(torch._C._autograd._profiler_enabled())


@pytest.mark.parametrize("mb", [1, 16, 100])
def test_a_known_allocation_reports_its_size_within_one_percent(mb):
    with PeakTracker(["cpu"]) as tracker:
        block = torch.empty(mb * MIB, dtype=torch.uint8)
        del block
    peak = tracker.results["cpu"]
    assert peak.added == pytest.approx(mb * MIB, rel=0.01)
    assert peak.at_end - peak.at_start < 0.01 * mb * MIB
    assert peak.largest[0].size == mb * MIB and peak.largest[0].freed


def test_tensors_alive_at_the_start_count_towards_the_peak():
    kept = torch.zeros(4 * MIB, dtype=torch.uint8)
    with PeakTracker(["cpu"]) as tracker:
        extra = torch.ones(2 * MIB, dtype=torch.uint8)
    peak = tracker.results["cpu"]
    assert peak.at_start >= 4 * MIB
    assert peak.peak - peak.at_start == pytest.approx(2 * MIB, rel=0.01)
    (block, *_) = peak.largest
    assert block.tensor is None and not block.freed  # named on demand only
    tracker.name_blocks()
    (block, *_) = tracker.results["cpu"].largest
    assert block.tensor == "tensor [2097152] uint8" and not block.freed
    del kept, extra


def test_the_peak_is_the_highest_point_not_the_sum():
    with PeakTracker(["cpu"]) as tracker:
        for _ in range(5):
            block = torch.empty(8 * MIB, dtype=torch.uint8)
            del block
    assert tracker.results["cpu"].added == pytest.approx(8 * MIB, rel=0.01)


def test_profiler_is_stopped_also_when_the_body_fails():
    seen = []

    def body():
        with PeakTracker(["cpu"]):
            seen.append(_profiler_on())
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        body()
    assert seen == [True]
    assert not _profiler_on()


def test_a_running_profiler_leaves_the_cpu_unmeasured_and_untouched():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with PeakTracker(["cpu"]) as tracker:
            torch.ones(10)
        assert _profiler_on()
    assert "cpu" not in tracker.results
    assert "profiler" in tracker.unmeasured["cpu"]


def test_tracking_prints_nothing():
    # the profiler announces start and stop on stderr, the allocator warns about blocks
    # freed that it never saw allocated: neither may reach the user's console
    code = (
        "import torch\n"
        "from pytest_torch.core.peaks import PeakTracker\n"
        "old = [torch.ones(1) for _ in range(3)]\n"
        "with PeakTracker(['cpu']):\n"
        "    old.clear()\n"
        "    torch.ones(1000)\n"
        "print('done')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "done\n"
    assert out.stderr == ""


def test_peak_from_made_up_events():
    events = [
        CpuAllocation(0, 100, 1),
        CpuAllocation(1_000_000, 50, 2),
        CpuAllocation(2_000_000, -100, 1),
        CpuAllocation(3_000_000, 30, 3),
    ]
    peak = cpu_peak(events, at_start=1000, live_at_end={2: "tensor [50] uint8"})
    assert peak == PeakMemory(
        "cpu",
        1000,
        1150,
        1080,
        (Block(100, 0.0, None, True, 1), Block(50, 1.0, "tensor [50] uint8", False, 2)),
    )
    assert not peak.largest[1].freed
    assert peak.added == 150
    assert cpu_peak([], 7, {}) == PeakMemory("cpu", 7, 7, 7)


def test_recorder_refuses_to_start_twice():
    recorder = cpu_memory.CpuAllocationRecorder()
    assert recorder.start()
    try:
        with pytest.raises(RuntimeError, match="already running"):
            recorder.start()
    finally:
        recorder.stop()
    assert recorder.stop() == []


def test_format_bytes():
    assert [format_bytes(n) for n in (12, 3 * 1024, 812.4 * MIB, -2 * MIB, 5 * 2**30)] == [
        "12 B",
        "3.0 KiB",
        "812.4 MiB",
        "-2.0 MiB",
        "5.0 GiB",
    ]


@pytest.mark.accelerator
def test_accelerator_peak_and_start(accelerator):
    kept = torch.zeros(8 * MIB, dtype=torch.uint8, device=accelerator)
    with PeakTracker([accelerator]) as tracker:
        block = torch.empty(32 * MIB, dtype=torch.uint8, device=accelerator)
        del block
    (peak,) = tracker.results.values()
    assert peak.device.startswith(accelerator)
    assert peak.at_start >= 8 * MIB
    assert peak.added == pytest.approx(32 * MIB, rel=0.01)
    del kept


def test_nested_cpu_trackers_both_see_their_own_peak():
    """A tracker inside another (perf_baseline inside a memory-budgeted test) joins the
    outer one's recording: neither is refused nor under-reports."""
    with PeakTracker(["cpu"]) as outer:
        big = torch.empty(32 * MIB, dtype=torch.uint8)
        del big
        with PeakTracker(["cpu"]) as inner:
            small = torch.empty(8 * MIB, dtype=torch.uint8)
            del small
        after = torch.empty(4 * MIB, dtype=torch.uint8)
        del after
    assert not outer.unmeasured and not inner.unmeasured
    assert inner.results["cpu"].added == pytest.approx(8 * MIB, rel=0.01)
    assert outer.results["cpu"].added == pytest.approx(32 * MIB, rel=0.01)
    assert not _profiler_on()


def test_a_tracker_left_open_inside_another_still_ends_the_recording():
    outer = PeakTracker(["cpu"])
    outer.start()
    inner = PeakTracker(["cpu"])
    inner.start()
    block = torch.empty(2 * MIB, dtype=torch.uint8)
    del block
    outer.stop()  # out of order: the inner one is still recording
    assert _profiler_on()
    inner.stop()
    assert not _profiler_on()
    assert outer.results["cpu"].added == pytest.approx(2 * MIB, rel=0.01)
    assert inner.results["cpu"].added == pytest.approx(2 * MIB, rel=0.01)


class FakeCounter:
    """One device's allocator counters, global like CUDA's: allocated and a peak that
    only reset_peak_memory lowers."""

    def __init__(self):
        self.allocated = self.peak = 0

    def allocate(self, size):
        self.allocated += size
        self.peak = max(self.peak, self.allocated)

    def free(self, size):
        self.allocated -= size


@pytest.fixture
def fake_gpu(monkeypatch):
    counter = FakeCounter()
    monkeypatch.setattr(devices, "is_available", lambda t: t in ("cpu", "cuda"))
    monkeypatch.setattr(devices, "is_initialized", lambda t: True)
    monkeypatch.setattr(devices, "synchronize", lambda d: None)
    monkeypatch.setattr(
        devices,
        "memory_stats",
        lambda d: devices.MemoryStats(str(d), counter.allocated, counter.peak),
    )

    def reset(d):
        counter.peak = counter.allocated
        return True

    monkeypatch.setattr(devices, "reset_peak_memory", reset)
    return counter


def test_a_nested_tracker_does_not_hide_the_outer_peak(fake_gpu):
    """The peak counter is global per device: the inner tracker's reset must not erase
    the 300 MiB the outer window saw before it."""
    with PeakTracker(["cuda:0"]) as outer:
        fake_gpu.allocate(300 * MIB)
        fake_gpu.free(300 * MIB)
        with PeakTracker(["cuda:0"]) as inner:
            fake_gpu.allocate(50 * MIB)
            fake_gpu.free(50 * MIB)
        fake_gpu.allocate(20 * MIB)
        fake_gpu.free(20 * MIB)
    assert outer.results["cuda:0"].peak == 300 * MIB
    assert inner.results["cuda:0"].peak == 50 * MIB


def test_the_outer_peak_after_the_inner_tracker_is_also_seen(fake_gpu):
    with PeakTracker(["cuda:0"]) as outer:
        fake_gpu.allocate(10 * MIB)
        with PeakTracker(["cuda:0"]):
            pass
        fake_gpu.allocate(500 * MIB)
        fake_gpu.free(510 * MIB)
    assert outer.results["cuda:0"].peak == 510 * MIB
    assert outer.results["cuda:0"].at_end == 0


@pytest.mark.accelerator
def test_nested_accelerator_trackers(accelerator):
    device = torch.device(accelerator, 0)
    torch.ones(1, device=device)  # initialised: the counters are live
    with PeakTracker([device]) as outer:
        big = torch.empty(256 * MIB, dtype=torch.uint8, device=device)
        del big
        with PeakTracker([device]) as inner:
            small = torch.empty(16 * MIB, dtype=torch.uint8, device=device)
            del small
    assert outer.results[f"{accelerator}:0"].added == pytest.approx(256 * MIB, rel=0.01)
    assert inner.results[f"{accelerator}:0"].added == pytest.approx(16 * MIB, rel=0.01)


def test_the_census_skips_fake_and_meta_tensors_without_a_warning():
    """torch.compile leaves fake tensors behind; asking their storage's address makes
    torch warn "Accessing the data pointer of FakeTensor is deprecated" in the user's
    run. They hold no memory and are skipped."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    from pytest_torch.core.peaks import live_tensor_bytes, storage_key

    with FakeTensorMode():
        fake = torch.ones(1024)
    meta = torch.ones(1024, device="meta")
    real = torch.ones(1024)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert storage_key(fake) is None and storage_key(meta) is None
        assert storage_key(real) is not None
        total, named = live_tensor_bytes("cpu")
    assert total >= 4096 and real.untyped_storage().data_ptr() in named
    del fake, meta, real


def test_nested_and_sparse_tensors_alive_do_not_break_a_measurement():
    """A nested tensor has no single shape (reading it raises); one alive anywhere in
    the process must not turn a user's budgeted test into our RuntimeError."""
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    sparse = torch.ones(4, 4).to_sparse()
    kept = torch.zeros(MIB, dtype=torch.uint8)
    with PeakTracker(["cpu"]) as tracker:
        block = torch.empty(2 * MIB, dtype=torch.uint8)
    tracker.name_blocks()
    assert tracker.results["cpu"].added == pytest.approx(2 * MIB, rel=0.01)
    from pytest_torch.core.peaks import describe_tensor, live_tensor_bytes

    assert describe_tensor(nested) == "nested tensor of 2 tensors, float32"
    described = live_tensor_bytes("cpu")[1].values()
    assert "tensor [1048576] uint8" in described
    del nested, sparse, kept, block
