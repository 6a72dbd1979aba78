"""Unit tests of the device layer."""

from __future__ import annotations

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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_memory_stats_follow_allocations():
    device = torch.device("cuda", torch.cuda.current_device())
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
    assert devices.default_device("cuda").index == torch.cuda.current_device()
    assert devices.total_memory(device)
    assert devices.compute_capability(device)
