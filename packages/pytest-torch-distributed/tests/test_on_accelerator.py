"""Ranks on an accelerator with no collective backend of its own (a PrivateUse1
backend such as the emulated one of the test command): rank r on device r, gloo for
the CPU tensors, more ranks than devices skipped unless shared, and a test's id and
``torch_device`` saying where its ranks run. CUDA's nccl ranks: test_on_gpu.py."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.accelerator

SUITE = """
import pytest
import torch
import torch.distributed as dist

KIND = "{kind}"


@pytest.mark.torch_distributed(world_size=2, device=KIND)
def test_ranks(rank, torch_device):
    assert torch_device == torch.device(KIND, rank)
    assert torch.accelerator.current_device_index() == rank
    assert torch.empty(1, device=KIND).device == torch_device
    assert dist.get_backend() == "gloo"
    on_device = torch.ones(4, device=torch_device) * (rank + 1)
    summed = on_device.cpu()
    dist.all_reduce(summed)
    assert summed.tolist() == [3.0] * 4


@pytest.mark.torch_distributed(world_size=3, device=KIND)
def test_too_many():
    pass


@pytest.mark.torch_distributed(world_size=3, device=KIND, share_devices=True)
def test_shared(rank, torch_device):
    assert torch_device == torch.device(KIND, rank % 2)
    assert torch.accelerator.current_device_index() == rank % 2
"""


@pytest.fixture
def kind(accelerator: str) -> str:
    if accelerator in ("cuda", "xpu"):
        pytest.skip(f"{accelerator} ranks use their own backend: test_on_gpu.py")
    if torch.accelerator.device_count() != 2:
        pytest.skip(f"needs exactly 2 {accelerator} devices")
    return accelerator


def test_rank_r_on_device_r_with_gloo_and_the_id_saying_where(run, pytester, kind):
    pytester.makepyfile(test_ranks=SUITE.format(kind=kind))
    result = run("-rA", "-p", "no:randomly")
    # test_ranks[cpu] is skipped: its ranks would run on the accelerator the marker names
    result.assert_outcomes(passed=2, skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            f"PASSED test_ranks.py::test_ranks[[]{kind}[]]",
            "SKIPPED [[]1[]] test_ranks.py:*: this variant's torch_device is cpu, and the"
            f" marker's device=('{kind}',) does not include it*",
            f"SKIPPED *3 ranks need 3 {kind} devices, one each, and this process sees 2*",
            f"*2 ranks, gloo on {kind}:0, {kind}:1 ({kind} has no collective backend of its own"
            " in this torch: gloo takes the CPU tensors)*",
        ]
    )
