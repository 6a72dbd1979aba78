"""The GPU paths on real CUDA GPUs: nccl on one GPU per rank, the per-test device,
never two ranks on one GPU unless asked, and a worker's GPUs under pytest-xdist."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda(reason="nccl, one CUDA GPU per rank")

TWO_GPUS = pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (nccl, one per rank)"
)

BODY = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.torch_distributed(world_size=2)
def test_nccl(rank, torch_device):
    # test_nccl[cpu]: gloo on the CPU; test_nccl[cuda]: nccl, cuda:<rank>
    on_gpu = torch_device.type == "cuda"
    # on a GPU: nccl for CUDA tensors, gloo beside it for CPU ones
    assert str(dist.get_backend()) == ("cpu:gloo,cuda:nccl" if on_gpu else "gloo")
    if on_gpu:
        cpu = torch.ones(1)
        dist.all_reduce(cpu)
        assert cpu.item() == 2
    assert not on_gpu or torch_device.index == torch.cuda.current_device() == rank
    t = torch.ones(4, device=torch_device) * (rank + 1)
    dist.all_reduce(t)
    assert t.tolist() == [3.0] * 4


@pytest.mark.torch_distributed(world_size=2, device="cpu")
def test_cpu_ranks_on_a_gpu_machine():
    assert dist.get_backend() == "gloo"
"""


@TWO_GPUS
def test_nccl_ranks_each_on_their_gpu(run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_g=BODY)
    result = run("-rA", "-k", "nccl or cpu_ranks")
    result.assert_outcomes(passed=3)  # test_nccl[cpu] (gloo), test_nccl[cuda], cpu ranks
    result.stdout.fnmatch_lines(["*2 ranks, cpu:gloo,cuda:nccl on cuda:0, cuda:1: 1*"])


def test_more_ranks_than_gpus_skip_unless_shared(run, pytester: pytest.Pytester) -> None:
    count = torch.cuda.device_count()
    pytester.makepyfile(
        test_g=f"""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size={count + 1}, device="cuda")
        def test_too_many():
            pass

        @pytest.mark.torch_distributed(world_size={count + 1}, device="cuda", share_devices=True)
        def test_shared_nccl():
            pass

        @pytest.mark.torch_distributed(
            world_size={count + 1}, device="cuda", share_devices=True, backend="gloo"
        )
        def test_shared(rank):
            assert torch.cuda.current_device() == rank % {count}
            t = torch.ones(1, device="cuda")
            dist.all_reduce(t)
            assert t.item() == {count + 1}
        """
    )
    result = run("-rA")
    # test_too_many and test_shared_nccl (NCCL refuses two ranks on one GPU) are skipped
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            f"SKIPPED * {count + 1} ranks need {count + 1} cuda devices, one each, and this process sees {count}*",
            "SKIPPED * cuda: nccl cannot put two ranks on one GPU*",
        ]
    )


@TWO_GPUS
def test_nccl_collectives_that_differ_are_named(run, pytester: pytest.Pytester) -> None:
    """NCCL's calls come from its own flight recorder: shapes that differ between the
    ranks are named, side by side, as gloo's are."""
    pytester.makepyfile(
        test_n="""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2, device="cuda", timeout=60)
        def test_uneven(rank):
            dist.all_reduce(torch.ones(4, device="cuda"))
            dist.all_reduce(torch.ones(4 + rank, device="cuda"))
            torch.cuda.synchronize()
        """
    )
    result = run("-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*collective #2 on the default group: rank 0 all_reduce float32[[]4]*rank 1 all_reduce"
            " float32[[]5]*"
        ]
    )
