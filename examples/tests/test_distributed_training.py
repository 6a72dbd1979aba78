"""Data-parallel tests of the regressor on two torch.distributed ranks.

Each test body runs on both ranks: ``[cpu]`` with gloo; ``[cuda]`` with nccl and one GPU
per rank where two GPUs are visible (skipped, saying why, elsewhere). Every fixture is
evaluated in each rank, so the ``regressor`` built from ``torch_seed`` starts the same
on both.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
from models import train_step
from torch.nn.parallel import DistributedDataParallel

from pytest_torch import assert_close, assert_replicas_in_sync, assert_same_across_ranks

pytestmark = pytest.mark.torch_distributed(world_size=2)


def rank_batch(
    seed: int, step: int, rank: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of features and targets at ``step``; any rank can draw
    any other's, for the single-process reference."""
    generator = torch.Generator().manual_seed(seed + 1000 * step + rank)
    features = torch.randn(8, 16, generator=generator)
    return features.to(device), torch.randn(8, generator=generator).to(device)


def test_data_parallel_training_matches_one_process_on_the_whole_batch(
    regressor, rank, world_size, torch_seed, torch_device
):
    reference = copy.deepcopy(regressor)  # one process that sees every rank's batch
    model = DistributedDataParallel(regressor)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for step in range(3):
        batches = [rank_batch(torch_seed, step, r, torch_device) for r in range(world_size)]
        train_step(model, optimizer, *batches[rank])
        features = torch.cat([inputs for inputs, _ in batches])
        targets = torch.cat([wanted for _, wanted in batches])
        train_step(reference, reference_optimizer, features, targets)
    # each rank trained on its own data: DDP's averaged gradients keep the replicas equal
    assert_replicas_in_sync(model)
    # ... and equal to training on the whole batch at once, up to rounding
    assert_close(model.module.state_dict(), reference.state_dict(), rtol=1e-5, atol=1e-6)


def test_sharded_predictions_gather_back_into_the_whole_batch(
    regressor, rank, world_size, make_tensor
):
    features = make_tensor(12, 16)  # seeded by torch_seed: the same batch on every rank
    regressor.eval()
    with torch.no_grad():
        shard = regressor(features.chunk(world_size)[rank])  # each rank predicts its part
        pieces = [torch.empty_like(shard) for _ in range(world_size)]
        dist.all_gather(pieces, shard)
        gathered = torch.cat(pieces)
        expected = regressor(features)
    assert_same_across_ranks(gathered, name="the gathered batch")
    assert_close(gathered, expected, rtol=1e-5, atol=1e-6)
