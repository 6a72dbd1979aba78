"""Unit tests of interference detection: the monitor in the timing engine (with virtual
time, a virtual CPU clock, scripted waits and a scripted reference loop), the probes on
fake /proc files, and the figures a measurement reports."""

from __future__ import annotations

import pytest

from pytest_torch.perf.engines.wall import contention, machine_probes
from pytest_torch.perf.engines.wall.contention import Interference, Monitor, core_factors
from pytest_torch.perf.engines.wall.machine_probes import (
    LoopReference,
    MachineReading,
    RunQueueProbe,
    descendants_cpu,
)
from pytest_torch.perf.engines.wall.timing import SamplingSettings, measure

MS = 1e-3


class Machine:
    """Virtual time in which a call runs 1 ms on the CPU. In given windows of time the
    process waits for a CPU as long again per call (calls then take 2 ms), or its core
    runs slow (the reference loop ``loop_slow`` times, the code ``code_slow`` times).
    ``sleeps``: the code itself sleeps this long per call (off the CPU, not waiting);
    ``ghost_wait``: the run queue reports this much more wait at every reading than the
    thread's CPU clock shows (a wait begun just before a sample is counted after it);
    ``outside``: a wait of this long just before each timed block starts."""

    method = "run-queue wait"

    def __init__(self, waiting=(), slow=(), loop_slow=1.6, code_slow=1.5, sleeps=0.0,
                 ghost_wait=0.0, outside=0.0):  # fmt: skip
        self.now = self.cpu = 0.0
        self.waiting, self.slow = waiting, slow
        self.loop_slow, self.code_slow = loop_slow, code_slow
        self.sleeps, self.ghost_wait, self.outside = sleeps, ghost_wait, outside
        self._waited = 0.0
        self._running = self._off = 0.0

    def _in(self, windows):
        return any(start <= self.now < end for start, end in windows)

    def fn(self):
        running = MS * (self.code_slow if self._in(self.slow) else 1.0)
        waited = MS if self._in(self.waiting) else 0.0
        self._running += running
        self._off += waited + self.sleeps
        self._waited += waited

    # the timer
    def start(self):
        self.now += self.outside
        self._waited += self.outside
        self._running = self._off = 0.0

    def stop(self):
        elapsed = self._running + self._off
        self.now += elapsed
        self.cpu += self._running
        return elapsed

    # the clocks and the probe
    def clock(self):
        return self.now

    def thread_clock(self):
        return self.cpu

    def waited(self):
        self._waited += self.ghost_wait
        return self._waited, 0.0

    def close(self):
        pass

    def loop(self):
        return 2e-5 * (self.loop_slow if self._in(self.slow) else 1.0)


def run(machine, machine_readings=None, reference=None, probe=True, **settings):
    readings = iter(machine_readings or [])
    monitor = Monitor(
        machine if probe else None,
        device_type="cpu",
        off_cpu_waits=not probe,
        loop=machine.loop,
        core=lambda: 1e-5,
        machine=lambda: next(readings, None),
        cores=2,
        reference=reference or LoopReference(),
        core_reference=LoopReference(),
        thread_clock=machine.thread_clock,
        wall_clock=machine.clock,
    )
    return measure(
        machine.fn,
        timer=machine,
        clock=machine.clock,
        device="cpu",
        threads=1,
        settings=SamplingSettings(**{"max_time": 0.1, "busy_max_time": 0.3, **settings}),
        monitor=monitor,
    )


def test_a_quiet_machine_sets_nothing_aside():
    result = run(Machine())
    assert (result.runs, result.median, result.busy) == (7, pytest.approx(1.0), False)
    found = result.interference
    assert (found.set_aside, found.samples, found.waited_share) == (0, 7, 0.0)
    assert found.reference_loop_s == pytest.approx(2e-5)
    assert found.core_probe_s == pytest.approx(1e-5)
    assert not found.disturbed
    assert result.generous_ms == pytest.approx(result.samples_ms)
    assert "set aside" not in result.describe()


def test_samples_that_waited_are_set_aside_and_enough_others_decide():
    # warm-up takes 4 ms; the process waits from 6 to 9 ms: two samples are disturbed
    result = run(Machine(waiting=[(0.006, 0.009)]))
    assert result.max == pytest.approx(1.0)  # only undisturbed samples
    assert result.set_aside_ms == (2.0, 2.0)
    found = result.interference
    assert (found.set_aside, found.slowed) == (2, 0)
    # sampling went on until the undisturbed samples added up to 20 ms
    assert found.undisturbed == result.runs >= 20
    assert found.undisturbed_s >= 0.02
    assert not result.busy
    # the generous figures take the waits out: 2 ms less 1 ms waited is the 1 ms call
    assert result.generous_ms == pytest.approx([1.0] * found.samples)
    assert "2 more set aside (disturbed: 2 waited for a CPU)" in result.describe()


def test_a_machine_waiting_at_first_is_sampled_longer_until_enough_samples_are_undisturbed():
    # waiting for the first 150 ms: past the 100 ms cap, sampling goes on (up to 300 ms)
    result = run(Machine(waiting=[(0.0, 0.15)]))
    found = result.interference
    assert not result.busy and result.median == pytest.approx(1.0)
    assert found.undisturbed >= 20 and found.set_aside >= 70
    assert found.disturbed  # said when recording: from the undisturbed samples of a busy run
    assert found.waited_share > 0.3


def test_a_machine_busy_throughout_keeps_every_sample_as_an_upper_bound():
    result = run(Machine(waiting=[(0.0, 1.0)]))
    assert result.busy
    assert result.stopped_by == "time cap"
    found = result.interference
    assert found.undisturbed == 0 and found.samples == result.runs
    assert result.median == pytest.approx(2.0)  # upper bounds, all kept
    assert result.generous("median") == pytest.approx(1.0)  # the waits taken out
    # sampling went on to the busy cap (300 ms) looking for undisturbed samples
    assert 0.3 <= found.samples * 0.002 <= 0.31
    assert "(disturbed: " in result.describe() and "each an upper bound" in result.describe()
    assert found.evidence().startswith(
        "this process waited for a CPU 50 % of the time (run-queue wait); 0 of"
    )


def test_a_wait_outside_the_timed_block_does_not_disturb_the_sample():
    # a 1 ms wait just before every timed block starts: in the block's wall time and in
    # the run queue, not in the sample
    result = run(Machine(outside=MS))
    assert not result.busy and result.interference.set_aside == 0
    assert result.generous_ms == pytest.approx(result.samples_ms)


def test_a_wait_the_run_queue_reports_late_is_not_the_samples():
    # the run queue says 2 ms more at every reading, the thread's CPU clock shows it
    # was never off its CPU: a wait begun just before the sample, not in it
    result = run(Machine(ghost_wait=2 * MS))
    assert result.interference.set_aside == 0 and not result.busy


def test_code_that_sleeps_by_itself_is_not_a_busy_machine():
    # off the CPU 0.5 ms per call (a data loader's queue), never in the run queue
    result = run(Machine(sleeps=0.5 * MS))
    assert result.interference.set_aside == 0 and not result.busy
    assert result.median == pytest.approx(1.5)
    # and a wait on top of that sleep is still seen
    result = run(Machine(sleeps=0.5 * MS, waiting=[(0.006, 0.009)]))
    assert result.interference.set_aside == 2


def test_without_a_run_queue_the_threads_time_off_its_cpu_is_its_wait():
    result = run(Machine(waiting=[(0.006, 0.009)]), probe=False)
    found = result.interference
    assert found.method == "time off the CPU"
    assert found.set_aside == 2 and not result.busy


def test_a_slow_loop_that_does_not_slow_the_code_sets_nothing_aside():
    # the loop runs 2x slow for a while, the code not at all: an idle machine
    result = run(Machine(slow=[(0.006, 0.03)], loop_slow=2.0, code_slow=1.0))
    found = result.interference
    assert found.set_aside == 0 and not result.busy and not found.disturbed
    assert found.code_slowdown == pytest.approx(1.0)


def test_samples_beside_a_core_that_slowed_the_code_count_by_the_codes_slowdown():
    # the loop 2.5x slow, the code 1.5x: set aside, and divided by 1.5, not 2.5
    result = run(Machine(slow=[(0.006, 0.03)], loop_slow=2.5, code_slow=1.5))
    found = result.interference
    assert found.slowed == found.set_aside >= 3
    assert found.code_slowdown == pytest.approx(1.5)
    assert found.loop_ratio == pytest.approx(2.5)
    assert found.core_factor == pytest.approx(1.5)
    assert result.max == pytest.approx(1.0)
    # the code's 1.5 ms samples count as 1 ms; a 1 ms sample beside the first or last
    # slow loop of the window comes out at 1 / 1.5 ms: generous, never more than measured
    generous = [round(value, 6) for value in result.generous_ms]
    assert set(generous) <= {1.0, round(1 / 1.5, 6)} and generous.count(1.0) >= len(generous) - 2
    assert "the core ran slow beside" in found.evidence()
    assert "(a reference loop up to 2.5x its best, the code 1.50x)" in found.evidence()
    assert not found.disturbed  # a slow core alone is not a busy machine


def test_a_core_slow_all_along_counts_by_the_loop_at_most_a_plausible_factor():
    # earlier in this process the loop ran 10x faster than it does throughout this
    # measurement: nothing tells how much the code slowed, so the loop's ratio counts,
    # but never more than a slowed core can explain
    reference = LoopReference()
    reference.note(2e-6)
    result = run(Machine(), reference=reference)
    found = result.interference
    assert result.busy and found.slowed == found.samples
    assert found.code_slowdown is None
    assert found.core_factor == contention.MAX_CORE_FACTOR
    assert result.generous("min") == pytest.approx(1.0 / contention.MAX_CORE_FACTOR)


def test_core_factors_need_evidence_on_both_sides():
    times = [1.0] * 10 + [1.3] * 10
    assert core_factors(times, [1.0] * 20) == ([1.0] * 20, None)
    factors, slowdown = core_factors(times, [1.0] * 10 + [2.0] * 10)
    assert slowdown == pytest.approx(1.3) and factors == pytest.approx([1.0] * 10 + [1.3] * 10)
    # two samples beside a slow loop among twelve are no evidence: their loop's ratio counts
    factors, slowdown = core_factors(times[:12], [1.0] * 10 + [2.0] * 2)
    assert slowdown is None and factors == [1.0] * 10 + [2.0] * 2
    # ... but of three long samples, one on each side is
    factors, slowdown = core_factors([1.0, 1.0, 1.02], [1.0, 1.0, 2.0])
    assert (factors, slowdown) == ([1.0] * 3, pytest.approx(1.02))
    # a loop ratio no core explains is capped
    factors, slowdown = core_factors([1.0] * 8, [1.0] * 7 + [20.0])
    assert factors == [1.0] * 7 + [contention.MAX_CORE_FACTOR] and slowdown is None


def test_a_slow_loop_beside_samples_that_all_waited_is_judged_by_their_cpu_time():
    # the process waits half of every call, and the loop runs 2.5x slow for a while
    # without slowing the code: the samples' time less their wait tells
    result = run(Machine(waiting=[(0.0, 1.0)], slow=[(0.02, 0.06)], loop_slow=2.5, code_slow=1.0))
    found = result.interference
    assert found.slowed == 0 and found.code_slowdown == pytest.approx(1.0)
    assert result.busy and result.generous("min") == pytest.approx(1.0)


def test_steal_and_other_processes_come_from_the_machine_counters():
    before = MachineReading(busy_s=10.0, steal_s=1.0, total_s=100.0, process_s=5.0, wall_s=0.0)
    after = MachineReading(busy_s=11.9, steal_s=1.2, total_s=102.0, process_s=5.1, wall_s=1.0)
    result = run(Machine(), [before, after])
    found = result.interference
    assert found.steal_share == pytest.approx(0.1)
    assert found.others_cores == pytest.approx(1.8)
    assert not result.busy  # undisturbed samples decide, whatever the steal
    assert found.disturbed  # but it is said: 10 % steal
    assert "other processes kept 1.8 of 2 cores busy" in found.evidence()
    assert "the hypervisor took 10 % (steal time)" in found.evidence()


def test_waiting_for_the_codes_own_worker_processes_is_the_codes_time():
    # every sample waits half its time: while a DataLoader's two workers (this
    # process's children) kept 1.5 cores busy and nobody else ran, that is the code
    def readings(busy_after: float):
        return [
            MachineReading(busy_s=10.0, steal_s=0.0, total_s=100.0, process_s=5.0,
                           wall_s=0.0, children={41: 2.0, 42: 0.5}),
            # 41 ran on, 42 ended (0.5 s before, 1.25 s in all, waited for), 43 just started
            MachineReading(busy_s=busy_after, steal_s=0.0, total_s=102.0, process_s=6.0,
                           wall_s=1.0, children={41: 2.75, 43: 0.0}, reaped_s=1.25),
        ]  # fmt: skip

    result = run(Machine(waiting=[(0.0, 1.0)]), readings(12.6))
    found = result.interference
    assert found.own_workers_cores == pytest.approx(1.5)
    assert found.others_cores == pytest.approx(0.1)
    assert (found.set_aside, found.waited_share, result.busy) == (0, 0.0, False)
    assert result.median == pytest.approx(2.0)  # the samples as they ran, waits included
    assert "its own worker processes 1.5 (part of the code)" in found.evidence()
    # with another process keeping a core busy too, the waits are interference again
    result = run(Machine(waiting=[(0.0, 1.0)]), readings(13.6))
    found = result.interference
    assert found.others_cores == pytest.approx(1.1)
    assert found.set_aside == found.samples and result.busy


def test_a_processs_descendants_and_their_cpu_time_come_from_proc(tmp_path):
    import os

    def process(pid: int, children: dict[str, str], utime: int, stime: int) -> None:
        for tid, kids in children.items():
            (tmp_path / str(pid) / "task" / tid).mkdir(parents=True)
            (tmp_path / str(pid) / "task" / tid / "children").write_text(kids)
        fields = ["S", "1"] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 20
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (py thon) " + " ".join(fields))

    process(100, {"100": "200 ", "101": "300"}, 0, 0)
    process(200, {"200": "400"}, 150, 50)
    process(300, {"300": ""}, 10, 0)
    process(400, {"400": ""}, 5, 5)
    hertz = os.sysconf("SC_CLK_TCK")
    found = descendants_cpu(100, proc=str(tmp_path))
    assert found == {200: 200 / hertz, 300: 10 / hertz, 400: 10 / hertz}
    assert descendants_cpu(999, proc=str(tmp_path)) == {}


@pytest.mark.parametrize(
    ("found", "busy", "disturbed"),
    [
        (Interference("run-queue wait", 0.04, 0, 10), False, False),
        (Interference("run-queue wait", 0.5, 0, 10), False, True),  # nothing set aside
        (Interference("run-queue wait", 0.0, 6, 10, undisturbed_s=1.0), True, True),
        (Interference("run-queue wait", 0.0, 5, 10, undisturbed_s=1.0), False, True),
        (Interference("run-queue wait", 0.0, 5, 10, undisturbed_s=0.01), True, True),
        (Interference("run-queue wait", 0.0, 5, 10, slowed=5, undisturbed_s=1.0), False, False),
        (Interference("", 0.0, 0, 10, steal_share=0.06), False, True),
        (Interference("", 0.0, 0, 10, steal_share=0.01), False, False),
        (Interference("", 0.0, 13, 20, min_undisturbed=8, undisturbed_s=1.0), True, True),
        # calls so long that 3 samples were taken: 2 undisturbed are enough
        (Interference("", 0.0, 1, 3, undisturbed_s=7.0), False, True),
        (Interference("", 0.0, 2, 3, undisturbed_s=3.5), True, True),
    ],
)
def test_what_counts_as_busy_and_as_disturbed(found, busy, disturbed):
    assert (found.busy, found.disturbed) == (busy, disturbed)


def test_the_run_queue_probe_tells_the_measuring_thread_from_the_others(tmp_path):
    for tid, line in (("11", "900 1500000000 4\n"), ("12", "5 500000000 1\n")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line)
    probe = RunQueueProbe(str(tmp_path), main=11)
    assert probe.waited() == pytest.approx((1.5, 0.5))
    (tmp_path / "12" / "schedstat").write_text("5 700000000 1\n")
    assert probe.waited() == pytest.approx((1.5, 0.7))
    probe.close()
    assert RunQueueProbe(str(tmp_path), main=99).waited() == pytest.approx((0.0, 2.2))
    with pytest.raises(OSError, match="no readable schedstat"):
        RunQueueProbe(str(tmp_path / "11"))


def test_probes_by_platform(monkeypatch):
    def unavailable(*args):
        raise OSError("no schedstat")

    assert isinstance(machine_probes.wait_probe("cuda", 4), (RunQueueProbe, type(None)))
    monkeypatch.setattr(machine_probes, "RunQueueProbe", unavailable)
    assert machine_probes.wait_probe("cpu", 1) is None
    assert machine_probes.off_cpu_waits("cpu", 1)  # then time off the CPU is waiting ...
    assert not machine_probes.off_cpu_waits("cpu", 2)  # ... but not with workers beside
    assert not machine_probes.off_cpu_waits("cuda", 1)  # nor while waiting for the GPU


def test_the_reference_loop_drops_a_run_spent_off_its_cpu():
    ticks = iter([0.0, 10.0, 30.0, 30.0])  # thread clock: 20 of 30 µs off the CPU
    walls = iter([5.0, 35.0])
    assert machine_probes.reference_loop(lambda: next(walls), lambda: next(ticks)) is None
    ticks = iter([0.0, 29.0])
    walls = iter([5.0, 35.0])
    assert machine_probes.reference_loop(lambda: next(walls), lambda: next(ticks)) == 30.0
    assert machine_probes.reference_loop() > 0
    ticks = iter([0.0, 29.0])
    walls = iter([5.0, 35.0])
    assert machine_probes.core_probe(lambda: next(walls), lambda: next(ticks)) == 30.0
    assert machine_probes.core_probe() > 0


def test_machine_counters_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    reading = machine_probes.read_machine(str(stat))
    hertz = __import__("os").sysconf("SC_CLK_TCK")
    assert reading.busy_s == pytest.approx(155 / hertz)
    assert reading.steal_s == pytest.approx(35 / hertz)
    assert reading.total_s == pytest.approx(1000 / hertz)
    stat.write_text("intr 1 2 3\n")
    assert machine_probes.read_machine(str(stat)) is None
    assert machine_probes.read_machine(str(tmp_path / "missing")) is None


def test_the_reference_keeps_the_fastest_loop():
    reference = LoopReference()
    for seconds in (3e-5, 2e-5, 0.0, None, 2.5e-5):
        reference.note(seconds)
    assert reference.best == 2e-5


def test_a_real_measurement_reports_what_it_saw():
    import torch

    from pytest_torch.perf import measure_latency

    before = torch.get_num_threads()
    seen = []
    result = measure_latency(
        lambda: seen.append(torch.get_num_threads()),
        settings=SamplingSettings(max_time=0.02, busy_max_time=0.05),
        threads=1,
    )
    assert set(seen) == {1} and result.threads == 1
    assert torch.get_num_threads() == before
    found = result.interference
    assert found is not None and found.samples >= result.runs >= 3
    assert found.reference_loop_s is not None and found.reference_loop_s > 0
    assert found.core_probe_s is not None and found.core_probe_s > 0
    assert len(result.generous_ms) == found.samples
