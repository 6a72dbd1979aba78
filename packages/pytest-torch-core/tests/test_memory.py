"""Peak memory through the device layer: the CPU tracker's accuracy and its clean-up."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pytest_torch.core import cpu_memory
from pytest_torch.core.cpu_memory import CpuAllocation
from pytest_torch.core.memory import Block, PeakMemory, PeakTracker, cpu_peak, format_bytes

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
        "from pytest_torch.core.memory import PeakTracker\n"
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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_peak_and_start():
    kept = torch.zeros(8 * MIB, dtype=torch.uint8, device="cuda")
    with PeakTracker(["cuda"]) as tracker:
        block = torch.empty(32 * MIB, dtype=torch.uint8, device="cuda")
        del block
    (peak,) = tracker.results.values()
    assert peak.device.startswith("cuda")
    assert peak.at_start >= 8 * MIB
    assert peak.added == pytest.approx(32 * MIB, rel=0.01)
    del kept
