"""The parallel features on any accelerator torch reports, with two devices: the
emulated one in the test command, a GPU machine under scripts/gpu-check. A type without
a visibility variable (a PrivateUse1 backend) gets its device as the worker's current
one."""

from __future__ import annotations

import json

import pytest
import torch

pytestmark = pytest.mark.accelerator

SUITE = """
import json, os
import pytest
import torch

module = torch.get_device_module("{kind}")


@pytest.mark.parametrize("i", range(4))
def test_where(i, torch_device):
    index = torch_device.index
    entry = {{
        "worker": os.environ["PYTEST_XDIST_WORKER"],
        "device": str(torch_device),
        "current": torch.accelerator.current_device_index(),
        "bare": str(torch.empty(1, device="{kind}").device),
        "fraction": module.get_per_process_memory_fraction(index),
    }}
    total = torch.accelerator.get_memory_info(torch_device)[1]
    with pytest.raises(torch.OutOfMemoryError):  # over this worker's share
        torch.empty(int(total * 0.9), dtype=torch.uint8, device=torch_device)
    with open(os.environ["DEVICE_LOG"], "a") as out:
        out.write(json.dumps(entry) + "\\n")
"""


def test_workers_on_devices_0_and_1_with_their_shares(
    pytester, run_workers, monkeypatch, accelerator
):
    if torch.accelerator.device_count() < 2:
        pytest.skip(f"needs 2 {accelerator} devices")
    if accelerator in ("cuda", "xpu"):
        pytest.skip("CUDA and XPU workers are narrowed by their variable: test_on_gpu.py")
    log = pytester.path / "device.jsonl"
    monkeypatch.setenv("DEVICE_LOG", str(log))
    pytester.makepyfile(test_it=SUITE.format(kind=accelerator))
    result = run_workers(
        "--torch-xdist-gpus=0,1",
        "--torch-gpu-memory-fraction=auto",
        f"--torch-device={accelerator}",
    )
    result.assert_outcomes(passed=4)
    total = torch.accelerator.get_memory_info(f"{accelerator}:0")[1] / 2**30
    share = (total - 2) / total  # one worker per device: 1 GiB for it, 1 for the process
    result.stdout.fnmatch_lines(
        [
            f"  gw0: {accelerator}:0, {share:.1%} of its memory, *",
            f"  gw1: {accelerator}:1, {share:.1%} of its memory, *",
        ]
    )
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    by_worker = {e["worker"]: e for e in entries}
    assert len(entries) == 4 and set(by_worker) == {"gw0", "gw1"}
    for entry in entries:
        index = int(entry["worker"][2:])
        assert entry["device"] == entry["bare"] == f"{accelerator}:{index}"
        assert entry["current"] == index
        assert entry["fraction"] == pytest.approx(share)


PLAIN = """
import os
import pytest
import torch

module = torch.get_device_module("{kind}")


def _log(text):
    with open(os.environ["DEVICE_LOG"], "a") as out:
        out.write(text + "\\n")


@pytest.hookimpl(trylast=True)  # after the plugin lifted the cap
def pytest_unconfigure(config):
    _log(f"end {{module.get_per_process_memory_fraction(0)}}")
"""


def test_a_fraction_without_workers_is_applied_and_lifted(pytester, monkeypatch, accelerator):
    if accelerator in ("cuda", "xpu"):
        pytest.skip("CUDA's own version is in test_on_gpu.py")
    log = pytester.path / "device.jsonl"
    monkeypatch.setenv("DEVICE_LOG", str(log))
    pytester.makeconftest(PLAIN.format(kind=accelerator))
    pytester.makepyfile(
        test_capped=f"""
        import pytest
        import torch
        from conftest import _log, module

        def test_capped():
            _log(f"test {{module.get_per_process_memory_fraction(0)}}")
            total = torch.accelerator.get_memory_info("{accelerator}:0")[1]
            with pytest.raises(torch.OutOfMemoryError):
                torch.empty(int(total * 0.3), dtype=torch.uint8, device="{accelerator}")
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "torch_xdist", "-p", "no:xdist", "--torch-gpu-memory-fraction=0.25"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [f"torch GPU memory: {accelerator}:0 capped at 25.0% of its memory*"]
    )
    assert log.read_text().split("\n")[:2] == ["test 0.25", "end 1.0"]
