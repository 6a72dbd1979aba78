"""assert_replicas_in_sync and assert_same_across_ranks on real DDP code: the bugs they
must catch, and correct code they must pass."""

from __future__ import annotations

SUITE = """
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from pytest_torch.distributed import assert_replicas_in_sync, assert_same_across_ranks

pytestmark = pytest.mark.torch_distributed(world_size=2)


def model():
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))


def step(ddp, rank):
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)  # each rank its own batch
    ddp(torch.randn(16, 4)).pow(2).mean().backward()
    optimizer.step()


def test_ok_ddp_step(rank):
    ddp = DDP(model())
    step(ddp, rank)
    ddp.eval()
    ddp(torch.zeros(2, 4))  # eval forward: rank 0's buffers are broadcast, none updated
    assert_replicas_in_sync(ddp)


def test_ok_parameters_only_after_a_training_step(rank):
    ddp = DDP(model())
    step(ddp, rank)
    assert_replicas_in_sync(ddp, buffers=False)


def test_ok_same_seed_on_every_rank(torch_seed):
    torch.manual_seed(torch_seed)
    assert_replicas_in_sync(model())


def test_ok_within_tolerance(rank):
    torch.manual_seed(0)
    net = model()
    with torch.no_grad():
        net[0].weight[0, 0] += 1e-6 * rank
    assert_replicas_in_sync(net, atol=1e-5)


def test_bad_unsynchronised_batchnorm(rank):
    torch.manual_seed(0)
    ddp = DDP(model(), broadcast_buffers=False)
    step(ddp, rank)
    assert_replicas_in_sync(ddp)


def test_bad_update_outside_ddp(rank):
    ddp = DDP(model())
    if rank == 1:
        with torch.no_grad():
            ddp.module[0].weight[2, 1] += 0.5
    assert_replicas_in_sync(ddp)


def test_bad_unseeded_init(rank):
    torch.manual_seed(rank)
    assert_replicas_in_sync(model())


def test_ok_same_values():
    assert_same_across_ranks(torch.arange(3))
    assert_same_across_ranks({"epoch": 2, "lr": 0.1}, name="schedule")


def test_bad_metrics_differ_slightly(rank):
    assert_same_across_ranks({"acc": torch.tensor(0.5 + 1e-7 * rank), "step": 3}, name="metrics")


def test_bad_value_differs(rank):
    assert_same_across_ranks(len(range(rank + 3)), name="dataset length")
"""


def test_replica_checks_catch_drift_and_pass_correct_code(run, pytester) -> None:
    pytester.makepyfile(test_r=SUITE)
    result = run("-rA")
    result.assert_outcomes(passed=5, failed=5)
    result.stdout.fnmatch_lines_random(
        [
            "PASSED test_r.py::test_ok_ddp_step",
            "PASSED test_r.py::test_ok_parameters_only_after_a_training_step",
            "PASSED test_r.py::test_ok_same_seed_on_every_rank",
            "PASSED test_r.py::test_ok_within_tolerance",
            "PASSED test_r.py::test_ok_same_values",
            "FAILED test_r.py::test_bad_unsynchronised_batchnorm*",
            "FAILED test_r.py::test_bad_update_outside_ddp*",
            "FAILED test_r.py::test_bad_unseeded_init*",
            "FAILED test_r.py::test_bad_value_differs*",
            "FAILED test_r.py::test_bad_metrics_differ_slightly*",
        ]
    )
    output = result.stdout.str()
    batchnorm = output.split("_ test_bad_unsynchronised_batchnorm _")[1].split("_ test_bad_")[0]
    assert (
        "first: buffer 1.running_mean (shape [8], float32): rank 1 differs from rank 0" in batchnorm
    )
    assert "Buffers differ: this DDP model was built with broadcast_buffers=False" in batchnorm
    assert "Parameters differ" not in batchnorm
    outside = output.split("_ test_bad_update_outside_ddp _")[1].split("_ test_bad_")[0]
    assert "replicas out of sync: 1 of 9 tensors differ across the 2 ranks (bitwise)." in outside
    assert (
        "first: parameter 0.weight (shape [8, 4], float32): rank 1 differs from rank 0 by up to"
        " 0.5 in 1 of 32 elements (at [2, 1]:" in outside
    )
    assert "Parameters differ: either the ranks started apart" in outside
    unseeded = output.split("_ test_bad_unseeded_init _")[1].split("_ test_")[0]
    assert "4 of 9 tensors differ" in unseeded  # the weights and biases, not the buffers
    result.stdout.fnmatch_lines(
        [
            "E * AssertionError: metrics differs across ranks:",
            "E * metrics[[]'acc'[]]: rank 1 differs from rank 0 by up to 1.19209e-07 in 1 of 1*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E * AssertionError: dataset length differs across ranks:",
            "E * dataset length: rank 0 has 3; rank 1: 4",
        ]
    )
