"""Unit tests of interference detection: the monitor in the timing engine (with virtual
time, scripted waits and a scripted reference loop), the probes on fake /proc files,
and the figures a busy measurement reports."""

from __future__ import annotations

import pytest

from pytest_torch.perf import contention
from pytest_torch.perf.contention import (
    Interference,
    LoopReference,
    MachineReading,
    Monitor,
    RunQueueProbe,
)
from pytest_torch.perf.timing import SamplingSettings, measure


class Machine:
    """Virtual time in which calls take 1 ms, and in given windows of time the process
    waits for a CPU half of the time (calls then take 2 ms) or its core runs 1.6x slow
    (calls take 1.5 ms)."""

    method = "run-queue wait"

    def __init__(self, waiting=(), slow=()):
        self.now = 0.0
        self.waiting = waiting
        self.slow = slow
        self._waited = 0.0
        self._pending = 0.0

    def _in(self, windows):
        return any(start <= self.now < end for start, end in windows)

    def fn(self):
        duration = 0.002 if self._in(self.waiting) else 0.0015 if self._in(self.slow) else 0.001
        if self._in(self.waiting):
            self._waited += duration / 2
        self._pending += duration

    def start(self):
        self._pending = 0.0

    def stop(self):
        self.now += self._pending
        return self._pending

    def clock(self):
        return self.now

    def waited(self):
        return self._waited

    def close(self):
        pass

    def loop(self):
        return 2e-5 * (1.6 if self._in(self.slow) else 1.0)


def run(machine, machine_readings=None, **settings):
    readings = iter(machine_readings or [])
    monitor = Monitor(
        machine,
        loop=machine.loop,
        machine=lambda: next(readings, None),
        cores=2,
        reference=LoopReference(),
    )
    return measure(
        machine.fn,
        timer=machine,
        clock=machine.clock,
        device="cpu",
        threads=1,
        settings=SamplingSettings(**{"max_time": 0.1, **settings}),
        monitor=monitor,
    )


def test_a_quiet_machine_sets_nothing_aside():
    result = run(Machine())
    assert (result.runs, result.median, result.busy) == (7, pytest.approx(1.0), False)
    found = result.interference
    assert (found.set_aside, found.samples, found.waited_share) == (0, 7, 0.0)
    assert found.reference_loop_s == pytest.approx(2e-5)
    assert "set aside" not in result.describe()


def test_samples_that_waited_for_a_cpu_are_set_aside():
    # warm-up takes 4 ms; the process waits from 6 to 9 ms: samples 3 to 4 are disturbed
    result = run(Machine(waiting=[(0.006, 0.009)]))
    assert result.runs == 7 and result.max == pytest.approx(1.0)  # only undisturbed samples
    assert result.set_aside_ms == (2.0, 2.0)
    found = result.interference
    assert (found.set_aside, found.slowed, found.samples) == (2, 0, 9)
    assert found.waited_share == pytest.approx(0.002 / 0.011)
    assert result.busy  # 18 % of the sampling time waiting, even with 7 undisturbed samples
    assert "7 samples x 1 call, 2 more set aside (disturbed: 2 waited for a CPU)" in (
        result.describe()
    )


def test_samples_beside_a_slowed_core_are_set_aside():
    result = run(Machine(slow=[(0.006, 0.009)]))
    found = result.interference
    assert found.slowed == found.set_aside >= 2
    assert found.loop_ratio == pytest.approx(1.6)
    assert result.max == pytest.approx(1.0)
    assert "beside a slowed core" in result.describe()
    assert "the core ran slow beside" in found.evidence()


def test_a_machine_busy_throughout_keeps_every_sample_and_says_it_is_busy():
    result = run(Machine(waiting=[(0.0, 1.0)]))
    assert result.busy
    assert result.stopped_by == "time cap"
    found = result.interference
    assert found.undisturbed == 0 and found.samples == result.runs
    assert result.median == pytest.approx(2.0)  # upper bounds, all kept
    # time lost to interference earns twice the time cap before giving up
    assert 0.2 <= found.samples * 0.002 <= 0.21
    assert "(disturbed: " in result.describe() and "too few were not" in result.describe()
    assert found.evidence().startswith(
        "this process waited for a CPU 50 % of the time (run-queue wait); 0 of"
    )


def test_steal_and_other_processes_come_from_the_machine_counters():
    before = MachineReading(busy_s=10.0, steal_s=1.0, total_s=100.0, process_s=5.0, wall_s=0.0)
    after = MachineReading(busy_s=11.9, steal_s=1.2, total_s=102.0, process_s=5.1, wall_s=1.0)
    result = run(Machine(), [before, after])
    found = result.interference
    assert found.steal_share == pytest.approx(0.1)
    assert found.others_cores == pytest.approx(1.8)
    assert result.busy  # 10 % steal
    assert "other processes kept 1.8 of 2 cores busy" in found.evidence()
    assert "the hypervisor took 10 % (steal time)" in found.evidence()


@pytest.mark.parametrize(
    ("found", "busy"),
    [
        (Interference("run-queue wait", 0.04, 0, 10), False),
        (Interference("run-queue wait", 0.05, 0, 10), True),
        (Interference("run-queue wait", 0.0, 8, 10), True),  # 2 undisturbed samples
        (Interference("run-queue wait", 0.0, 7, 10), False),
        (Interference("", 0.0, 0, 10, steal_share=0.06), True),
        (Interference("", 0.0, 0, 10, steal_share=0.01), False),
    ],
)
def test_what_counts_as_busy(found, busy):
    assert found.busy is busy


def test_the_run_queue_probe_sums_every_threads_wait(tmp_path):
    for tid, line in (("11", "900 1500000000 4\n"), ("12", "5 500000000 1\n")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line)
    probe = RunQueueProbe(str(tmp_path))
    assert probe.waited() == pytest.approx(2.0)
    (tmp_path / "12" / "schedstat").write_text("5 700000000 1\n")
    assert probe.waited() == pytest.approx(2.2)
    probe.close()
    with pytest.raises(OSError, match="no readable schedstat"):
        RunQueueProbe(str(tmp_path / "11"))


def test_probes_by_platform(monkeypatch):
    def unavailable(*args):
        raise OSError("no schedstat")

    assert isinstance(contention.wait_probe("cuda", 4), (RunQueueProbe, type(None)))
    monkeypatch.setattr(contention, "RunQueueProbe", unavailable)
    assert isinstance(contention.wait_probe("cpu", 1), contention.OffCpuProbe)
    assert contention.wait_probe("cpu", 2) is None  # CPU time of one thread says nothing
    assert contention.wait_probe("cuda", 1) is None  # waiting for the GPU is not busy


def test_machine_counters_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    reading = contention.read_machine(str(stat))
    hertz = __import__("os").sysconf("SC_CLK_TCK")
    assert reading.busy_s == pytest.approx(155 / hertz)
    assert reading.steal_s == pytest.approx(35 / hertz)
    assert reading.total_s == pytest.approx(1000 / hertz)
    stat.write_text("intr 1 2 3\n")
    assert contention.read_machine(str(stat)) is None
    assert contention.read_machine(str(tmp_path / "missing")) is None


def test_the_reference_keeps_the_fastest_loop():
    reference = LoopReference()
    for seconds in (3e-5, 2e-5, 0.0, 2.5e-5):
        reference.note(seconds)
    assert reference.best == 2e-5
    assert contention.reference_loop() > 0


def test_a_real_measurement_reports_what_it_saw():
    import torch

    from pytest_torch.perf import measure_latency

    before = torch.get_num_threads()
    seen = []
    result = measure_latency(
        lambda: seen.append(torch.get_num_threads()),
        settings=SamplingSettings(max_time=0.02),
        threads=1,
    )
    assert set(seen) == {1} and result.threads == 1
    assert torch.get_num_threads() == before
    found = result.interference
    assert found is not None and found.samples >= result.runs >= 3
    assert found.reference_loop_s is not None and found.reference_loop_s > 0
