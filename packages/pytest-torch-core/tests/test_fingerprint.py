"""Unit tests of the hardware fingerprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pytest_torch.core.cpus import available_cores, cpu_model
from pytest_torch.core.fingerprint import (
    AcceleratorGroup,
    HardwareFingerprint,
    hardware_fingerprint,
)

H200 = AcceleratorGroup("cuda", "NVIDIA H200", 1, 139.8, "9.0")


def test_same_hardware_same_key_whatever_the_versions():
    a = HardwareFingerprint("AMD EPYC 9654", 16, (H200,), versions={"torch": "2.13.0"})
    b = HardwareFingerprint("AMD EPYC 9654", 16, (H200,), versions={"torch": "2.9.1"})
    assert a == b
    assert a.key == b.key


def test_cpu_model_and_core_count_and_gpu_model_all_matter():
    base = HardwareFingerprint("AMD EPYC 9654", 16, (H200,))
    other_cpu = HardwareFingerprint("Intel(R) Xeon(R) Platinum 8480+", 16, (H200,))
    other_count = HardwareFingerprint("AMD EPYC 9654", 8, (H200,))
    other_gpu = HardwareFingerprint(
        "AMD EPYC 9654", 16, (AcceleratorGroup("cuda", "NVIDIA A100-SXM4-80GB", 1, 79.2, "8.0"),)
    )
    no_gpu = HardwareFingerprint("AMD EPYC 9654", 16)
    keys = {fp.key for fp in (base, other_cpu, other_count, other_gpu, no_gpu)}
    assert len(keys) == 5


def test_how_many_gpus_are_visible_does_not_change_the_key():
    """CUDA_VISIBLE_DEVICES (or an xdist worker that sees only its own GPU) changes the
    count, not the model a test runs on: the baselines must stay found."""
    one = HardwareFingerprint("AMD EPYC 9654", 16, (H200,))
    eight = HardwareFingerprint(
        "AMD EPYC 9654", 16, (AcceleratorGroup("cuda", "NVIDIA H200", 8, 139.8, "9.0"),)
    )
    assert one.key == eight.key
    assert "8 x NVIDIA H200" in eight.accelerators[0].describe()


def test_key_is_readable():
    fp = HardwareFingerprint("AMD EPYC 9654", 16, (H200,))
    assert fp.key == "cpu: AMD EPYC 9654 x 16 | cuda: NVIDIA H200 (139.8 GiB, cc 9.0)"


def test_this_machine():
    fp = hardware_fingerprint()
    assert fp.cpu_model == cpu_model() != ""
    assert fp.logical_cpus == available_cores() >= 1
    assert "torch" in fp.versions and "python" in fp.versions
    assert fp is hardware_fingerprint()  # computed once
    data = fp.to_dict()
    assert json.loads(json.dumps(data))["key"] == fp.key
    assert "MHz" not in fp.key and "free" not in fp.key


def test_key_is_stable_across_processes():
    code = "from pytest_torch.core.fingerprint import hardware_fingerprint as h; print(h().key)"
    keys = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert keys == {hardware_fingerprint().key + "\n"}


def test_command_line_prints_the_key():
    out = subprocess.run(
        [sys.executable, "-m", "pytest_torch.core.fingerprint"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[0] == hardware_fingerprint().key
    assert "torch" in out


@pytest.mark.cuda(reason="CUDA_VISIBLE_DEVICES narrows what the key may see")
def test_the_key_is_the_same_whatever_gpus_are_visible():
    code = "from pytest_torch.core.fingerprint import hardware_fingerprint as h; print(h().key)"
    keys = set()
    for visible in (None, "0"):
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        keys.add(out.stdout.strip())
    assert len(keys) == 1, keys
    assert "| cuda: " in keys.pop()
