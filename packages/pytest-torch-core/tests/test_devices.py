"""Unit tests of the device layer."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from pytest_torch.core import devices


def test_cpu_is_always_available_and_listed_first():
    available = devices.available_device_types()
    assert available[0] == "cpu"
    assert devices.is_available("cpu")
    assert devices.device_count("cpu") == 1
    assert all(t in devices.KNOWN_DEVICE_TYPES for t in available)


def test_accelerators_match_torch():
    expected = ["cpu"]
    if torch.cuda.is_available():
        expected.append("cuda")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        expected.append("xpu")
    if torch.backends.mps.is_available():
        expected.append("mps")
    assert devices.available_device_types() == expected


def test_unknown_or_absent_types_are_not_available():
    assert not devices.is_available("tpu")
    assert devices.device_count("tpu") == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", None),
        ("auto", None),
        ("", None),
        ("cpu", ["cpu"]),
        ("cuda, CPU", ["cpu", "cuda"]),
        ("mps,xpu,cpu,cpu", ["cpu", "xpu", "mps"]),
    ],
)
def test_parse_device_types(value, expected):
    assert devices.parse_device_types(value, source="--torch-device") == expected


def test_parse_device_types_rejects_unknown_names_with_the_list():
    with pytest.raises(devices.DeviceSpecError) as info:
        devices.parse_device_types("cpu,tpu", source="--torch-device")
    message = str(info.value)
    assert message.startswith("--torch-device: unknown device type 'tpu'")
    assert "cpu, cuda, xpu, mps" in message


def test_parse_device_types_explains_indices():
    with pytest.raises(devices.DeviceSpecError, match="not indices"):
        devices.parse_device_types("cuda:1", source="--torch-device")


def test_cpu_synchronize_and_defaults():
    devices.synchronize("cpu")
    devices.synchronize(torch.device("cpu"))
    assert devices.default_device("cpu") == torch.device("cpu")
    assert devices.as_device("cpu") == torch.device("cpu")
    assert devices.device_name("cpu")


def test_cpu_memory_is_not_reported_by_this_layer_yet():
    assert devices.memory_stats("cpu") is None
    assert devices.reset_peak_memory("cpu") is False
    assert devices.total_memory("cpu") is None
    assert devices.compute_capability("cpu") is None


@pytest.mark.accelerator
def test_accelerator_memory_stats_follow_allocations(accelerator):
    device = devices.default_device(accelerator)
    assert devices.reset_peak_memory(device)
    before = devices.memory_stats(device)
    assert before is not None
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    during = devices.memory_stats(device)
    assert during is not None and during.allocated - before.allocated >= 64 * 2**20
    del block
    after = devices.memory_stats(device)
    assert after is not None and after.peak is not None
    assert after.peak >= before.allocated + 64 * 2**20
    devices.synchronize(device)
    assert devices.default_device(accelerator).index == torch.accelerator.current_device_index()
    assert devices.total_memory(device)
    if accelerator == "cuda":
        assert devices.compute_capability(device)


class FakeBackend(types.ModuleType):
    """A backend module that records its calls and refuses what would initialise it."""

    def __init__(self, name: str, *, initialized: bool = False, count: int = 2) -> None:
        super().__init__(f"torch.{name}")
        self.initialized, self.count, self.calls = initialized, count, []
        self.current, self.fraction, self.peak, self.allocated = 0, 1.0, 0, 0

    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def device_count(self):
        return self.count

    def current_device(self):
        if not self.initialized:
            raise AssertionError("current_device() initialises the backend")
        return self.current

    def synchronize(self, device=None):
        self.calls.append(("synchronize", device))


class FakeMps(types.ModuleType):
    """torch.mps's shape: one process-wide fraction, synchronize() without a device."""

    def __init__(self) -> None:
        super().__init__("torch.mps")
        self.calls = []

    def is_available(self):
        return True

    def set_per_process_memory_fraction(self, fraction):
        self.calls.append(("set_per_process_memory_fraction", fraction))

    def synchronize(self):
        self.calls.append(("synchronize",))


@pytest.fixture
def fake_backend(monkeypatch):
    """Make the device layer see one fake accelerator type through its module."""

    def install(kind: str, module: types.ModuleType, *, accelerator: bool = False):
        real = devices.backend_module
        monkeypatch.setattr(devices, "backend_module", lambda t: module if t == kind else real(t))
        monkeypatch.setattr(
            devices, "current_accelerator_type", lambda: kind if accelerator else None
        )
        monkeypatch.setattr(devices, "_accelerator_api", lambda: None)
        return module

    return install


def test_default_device_never_initialises_the_backend(fake_backend):
    cuda = fake_backend("cuda", FakeBackend("cuda", initialized=False))
    assert devices.default_device("cuda") == torch.device("cuda", 0)
    cuda.initialized, cuda.current = True, 1
    assert devices.default_device("cuda") == torch.device("cuda", 1)


def test_mps_takes_one_fraction_and_a_bare_synchronize(fake_backend):
    mps = fake_backend("mps", FakeMps())
    devices.set_memory_fraction("mps", 0.5)
    devices.synchronize("mps")
    assert mps.calls == [("set_per_process_memory_fraction", 0.5), ("synchronize",)]


def test_cuda_style_fraction_names_the_device(fake_backend):
    calls = []
    cuda = fake_backend("cuda", FakeBackend("cuda", initialized=True))
    cuda.set_per_process_memory_fraction = lambda fraction, device=None: calls.append(
        (fraction, device)
    )
    devices.set_memory_fraction("cuda:1", 0.25)
    assert calls == [(0.25, 1)]
    with pytest.raises(devices.DeviceSpecError, match="no per-process memory fraction"):
        devices.set_memory_fraction("hpu:0", 0.5)


def test_a_backend_torch_names_as_its_accelerator_is_listed_and_used(fake_backend):
    """An out-of-tree (PrivateUse1) backend: not in the family's list, but torch's
    current accelerator, so it goes through the same code as CUDA."""
    hpu = fake_backend("hpu", FakeBackend("hpu", initialized=True, count=3), accelerator=True)
    assert devices.accelerator_types()[-1] == "hpu"
    assert devices.available_device_types()[-1] == "hpu"
    assert devices.device_count("hpu") == 3
    assert devices.parse_device_types("hpu,cpu", source="--torch-device") == ["cpu", "hpu"]
    devices.synchronize("hpu:2")
    assert hpu.calls == [("synchronize", torch.device("hpu", 2))]


def test_the_real_accelerator_api_is_asked_when_torch_has_one(monkeypatch):
    asked = []

    class Accelerator:
        def current_accelerator(self):
            return torch.device("cuda")

        def is_available(self):
            asked.append("is_available")
            return True

        def device_count(self):
            asked.append("device_count")
            return 4

        def synchronize(self, device=None):
            asked.append(("synchronize", str(device)))

    monkeypatch.setattr(devices, "_accelerator_api", Accelerator)
    monkeypatch.setattr(devices, "current_accelerator_type", lambda: "cuda")
    monkeypatch.setattr(devices, "_torch", lambda: types.SimpleNamespace(accelerator=Accelerator()))
    assert devices.device_count("cuda") == 4
    devices.synchronize("cuda:3")
    assert asked == ["is_available", "device_count", ("synchronize", "cuda:3")]


@pytest.mark.cuda(reason="whether the device layer creates a CUDA context")
def test_asking_about_cuda_creates_no_context():
    """A CPU-only test on a GPU machine: the device layer and a CPU memory budget must
    leave CUDA uninitialised (a context costs ~0.5 GB and breaks forked children)."""
    code = """
import torch
from pytest_torch.core import devices
from pytest_torch.core.peaks import PeakTracker
assert devices.available_device_types()[:2] == ["cpu", "cuda"]
assert devices.device_count("cuda") >= 1
assert devices.default_device("cuda") == torch.device("cuda", 0)
assert devices.memory_fraction("cuda") is None
with PeakTracker([devices.default_device(t) for t in devices.available_device_types()]) as t:
    x = torch.ones(1024)
assert t.results["cuda:0"].peak == 0, t.results
print("initialised:", torch.cuda.is_initialized())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "initialised: False" in out.stdout


@pytest.mark.accelerator
def test_accelerator_memory_fraction_is_read_and_restored(accelerator):
    device = devices.default_device(accelerator)
    torch.ones(1, device=device)  # initialise
    before = devices.memory_fraction(device)
    assert before is None or 0 < before <= 1
    devices.set_memory_fraction(device, 0.5)
    try:
        if before is not None:
            assert devices.memory_fraction(device) == pytest.approx(0.5)
    finally:
        devices.set_memory_fraction(device, 1.0 if before is None else before)


@pytest.mark.accelerator
def test_accelerator_stopwatch_times_device_work(accelerator):
    """CUDA is timed with events; an accelerator without them (the emulator) is
    synchronized around the host clock."""
    device = devices.default_device(accelerator)
    a = torch.full((512, 512), 0.5, device=device)  # no RNG: the state guard stays quiet
    watch = devices.Stopwatch(device)
    assert watch.uses_events == (accelerator in ("cuda", "xpu"))
    watch.start()
    for _ in range(10):
        a = a @ a
        a = a / a.norm()
    seconds = watch.stop()
    assert 0 < seconds < 60
