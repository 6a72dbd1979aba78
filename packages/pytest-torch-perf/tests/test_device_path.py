"""One device path: checks and benchmark cases time the device core chose for the test
(its ``torch_device``, resolved once), and infer it from the inputs only where the test
chose none.

On a CPU-only machine the inner runs' conftest resolves ``cpu`` to ``cpu:0`` (or
``meta``): a device the inputs alone would never name, so the device each stopwatch was
asked for shows where it came from.
"""

from __future__ import annotations

import json

import pytest
import torch

from pytest_torch.perf.calls import work_device

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")

FAST = "--torch-perf-max-time=0.05"

#: appended to the conftest quiet_machine writes: cpu resolved to RESOLVE_TO, every
#: stopwatch's device recorded, the hook's calls printed at the end
RECORDING = """

import torch

from pytest_torch.core import devices

RESOLVED = []
ASKED = []
EVERY = set()


def pytest_torch_resolve_device(config, device_type):
    RESOLVED.append(device_type)
    return "{resolve_to}" if device_type == "cpu" else None


class RecordingStopwatch(devices.Stopwatch):
    def __init__(self, device):
        super().__init__(device)
        ASKED.append(str(self.device))
        EVERY.add(str(self.device))


@pytest.fixture(autouse=True)
def asked(monkeypatch):
    ASKED.clear()
    monkeypatch.setattr(devices, "Stopwatch", RecordingStopwatch)
    return ASKED


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"resolved: {{len(RESOLVED)}} call(s)")
    terminalreporter.write_line(f"stopwatches on: {{sorted(EVERY)}}")
"""


def _record(pytester: pytest.Pytester, resolve_to: str = "cpu:0") -> None:
    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + RECORDING.format(resolve_to=resolve_to))


# -- the rule ---------------------------------------------------------------------------


def test_without_a_chosen_device_the_inputs_decide_as_before():
    linear = torch.nn.Linear(2, 2)
    assert work_device(None, linear, (torch.ones(2, device="meta"),), {}) == torch.device("meta")
    assert work_device(None, linear, (), {}) == torch.device("cpu")  # the parameters'
    assert work_device(None, lambda: 1, (), {}) == torch.device("cpu")


def test_without_inputs_what_a_callable_holds_decides():
    """``lambda: model(x)`` on a GPU: timed without synchronising that GPU it would be
    timed at its kernel launches only."""
    import functools

    meta = torch.device("meta")
    model = torch.nn.Linear(2, 2, device="meta")
    x = torch.ones(2, device="meta")
    assert work_device(None, lambda: model(x), (), {}) == meta  # the closure's cells
    assert work_device(None, lambda: x * 2, (), {}) == meta
    assert work_device(None, model.forward, (), {}) == meta  # a bound method's module
    assert work_device(None, functools.partial(torch.add, x), (), {}) == meta
    assert work_device(None, lambda: torch.ones(2), (), {}) == torch.device("cpu")


def test_the_chosen_device_wins_where_the_inputs_say_nothing_else():
    cuda1 = torch.device("cuda", 1)
    # a callable that closes over its tensors: nothing to infer from
    assert work_device(cuda1, lambda: 1, (), {}) == cuda1
    assert work_device("cuda:1", lambda: 1, (), {}) == cuda1
    # inputs spread over several devices: the chosen one
    spread = (torch.ones(1), torch.ones(1, device="meta"))
    assert work_device(cuda1, lambda *a: 1, spread, {}) == cuda1
    # on the chosen device: an index left out matches any
    assert work_device("cpu:0", lambda x: x, (torch.ones(1),), {}) == torch.device("cpu:0")
    assert work_device("meta", lambda x: x, (torch.ones(1, device="meta"),), {}) == torch.device(
        "meta"
    )


def test_inputs_all_on_another_device_are_timed_where_they_run():
    cuda1 = torch.device("cuda", 1)
    cpu = torch.device("cpu")
    # a CPU tensor in a [cuda] test runs on the CPU: never synchronise an idle GPU for it
    assert work_device(cuda1, lambda x: x, (torch.ones(2),), {}) == cpu
    assert work_device(cuda1, lambda x: x, (), {"x": [torch.ones(2)]}) == cpu
    # no input tensors: a module's parameters and buffers say where it runs
    assert work_device(cuda1, torch.nn.BatchNorm1d(2), (), {}) == cpu
    assert work_device(cuda1, torch.nn.ReLU(), (), {}) == cuda1  # nothing to go by


def test_on_cpu_only_nothing_changes():
    x = torch.ones(2)
    for target, inputs in ((lambda v: v, (x,)), (torch.nn.Linear(2, 2), ()), (lambda: 1, ())):
        assert work_device("cpu", target, inputs, {}) == work_device(None, target, inputs, {})


# -- in real runs -----------------------------------------------------------------------

TESTS = """
import pytest
import torch

model = torch.nn.Linear(4, 4)


def test_closure(torch_device, latency, asked):
    x = torch.ones(4)
    result = latency(lambda: x + 1)
    assert torch_device == torch.device("cpu:0")
    assert set(asked) == {"cpu:0"} and result.device == "cpu:0"


@pytest.mark.torch_max_latency(ms=10_000)
def test_inputs_on_the_chosen_device(torch_device, latency, asked):
    result = latency(model, torch.ones(2, 4))  # cpu is cpu:0
    assert set(asked) == {"cpu:0"} and result.device == "cpu:0"


def test_without_torch_device_the_inputs_decide(latency, asked):
    x = torch.ones(4)
    assert latency(lambda: x + 1).device == "cpu"
    assert latency(model, x).device == "cpu"
    assert set(asked) == {"cpu"}
"""


def test_latency_times_the_chosen_device(pytester, run, quiet_machine):
    _record(pytester)
    pytester.makepyfile(test_paths=TESTS)
    result = run(FAST, "--torch-device=cpu")
    result.assert_outcomes(passed=3)
    # the fixture, and the checks' shared resolution: never once per test
    result.stdout.re_match_lines([r"resolved: [12] call\(s\)"])


def test_inputs_on_another_device_type_are_timed_on_theirs(pytester, run, quiet_machine):
    # the test's device resolves to meta, which cannot be synchronised: timing it would fail
    _record(pytester, resolve_to="meta")
    pytester.makepyfile(
        """
        import torch

        def test_cpu_tensor_in_a_meta_test(torch_device, latency, asked):
            assert torch_device.type == "meta"
            assert latency(lambda x: x + 1, torch.ones(4)).device == "cpu"
            assert set(asked) == {"cpu"}
        """
    )
    run(FAST, "--torch-device=cpu").assert_outcomes(passed=1)


def test_perf_baseline_times_and_records_the_chosen_device(pytester, run, quiet_machine):
    _record(pytester)
    pytester.makepyfile(
        """
        import torch

        def test_speed(torch_device, perf_baseline, asked):
            x = torch.ones(2, 4)
            perf_baseline(lambda: x @ x.T, latency_tolerance=10.0)
            assert set(asked) == {"cpu:0"}

        def test_plain(perf_baseline, asked):
            x = torch.ones(2, 4)
            perf_baseline(lambda: x @ x.T, latency_tolerance=10.0)
            assert set(asked) == {"cpu"}
        """
    )
    run(FAST, "--torch-device=cpu", "--torch-update-perf").assert_outcomes(passed=2)
    document = json.loads((pytester.path / ".torch-perf-baselines.json").read_text())
    (entries,) = document["machines"].values()
    by_test = {label.split("::")[-1]: entry["device"] for label, entry in entries.items()}
    assert by_test == {"test_speed[cpu]": "cpu:0", "test_plain": "cpu"}


def test_benchmark_cases_resolve_their_device_type_once(pytester, run, quiet_machine):
    _record(pytester)
    pytester.makepyfile(
        """
        import torch

        from pytest_torch.perf import benchmark_suite

        @benchmark_suite(batch_sizes=(1, 2, 4), dtypes=("float32",), modes=("eager",),
                         latency_tolerance=10.0)
        def test_net(batch_size, asked):
            return torch.nn.Linear(4, 4), torch.randn(batch_size, 4)
        """
    )
    result = run(FAST, "--torch-device=cpu", "--torch-benchmark")
    result.assert_outcomes(passed=3)
    result.stdout.re_match_lines([r"resolved: 1 call\(s\)"])
    result.stdout.re_match_lines([r"stopwatches on: \['cpu:0'\]"])
