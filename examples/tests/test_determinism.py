"""Determinism: proven where it should hold, diagnosed where it does not."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from models import MLPRegressor, TinyCNN

from pytest_torch import assert_deterministic, diagnose_nondeterminism


def test_classifier_inference_is_bitwise_deterministic(classifier, make_tensor):
    assert_deterministic(classifier, make_tensor(16, 1, 28, 28))


def test_a_training_step_is_deterministic(torch_device, make_tensor):
    model = MLPRegressor().to(torch_device)
    inputs = make_tensor(32, 16)

    def step():  # on a fresh copy: every run starts from the same weights
        fresh = copy.deepcopy(model)
        optimizer = torch.optim.Adam(fresh.parameters(), lr=1e-3)
        loss = F.mse_loss(fresh(inputs), inputs.sum(dim=1))
        loss.backward()
        optimizer.step()
        return loss.item(), [p.grad for p in fresh.parameters()], list(fresh.parameters())

    assert_deterministic(step, runs=3)


def test_training_mode_is_random_because_of_dropout(make_tensor):
    diagnosis = diagnose_nondeterminism(TinyCNN().train(), make_tensor(8, 1, 28, 28))
    assert diagnosis.category == "Randomness-driven"
    assert diagnosis.first_divergence == "`dropout` (Dropout)"


def test_batchnorm_updates_its_statistics_but_stays_deterministic(make_tensor):
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.BatchNorm1d(8)).train()
    diagnosis = diagnose_nondeterminism(model, make_tensor(32, 16))
    assert diagnosis.deterministic
    assert "buffer `1.running_mean`" in diagnosis.changed_state
