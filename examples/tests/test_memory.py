"""Memory: budgets that hold on every device (CPU included) and leak checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from models import TinyCNN, train_step

#: losses a careless evaluation loop keeps for a report (see the leaky test below)
loss_history: list[torch.Tensor] = []


@pytest.mark.torch_max_memory(mb=32)
def test_inference_fits_in_its_budget(classifier, make_tensor):
    with torch.inference_mode():
        classifier(make_tensor(64, 1, 28, 28))


@pytest.mark.torch_max_memory(mb=64)
def test_training_a_batch_fits_in_its_budget(torch_device, make_tensor):
    model = TinyCNN().to(torch_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = make_tensor(128, 1, 28, 28), torch.randint(0, 10, (128,), device=torch_device)
    optimizer.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()


@pytest.mark.torch_memory_leak(iterations=5)
def test_training_step_does_not_leak(regressor, make_tensor):
    optimizer = torch.optim.Adam(regressor.parameters(), lr=1e-3)
    inputs = make_tensor(64, 16)
    train_step(regressor, optimizer, inputs, inputs.sum(dim=1))


@pytest.mark.xfail(strict=True, reason="keeps every loss tensor, and with it the graph")
@pytest.mark.torch_memory_leak(iterations=5)
def test_evaluation_keeps_losses_for_a_report(regressor, make_tensor):
    inputs = make_tensor(64, 16)
    loss = F.mse_loss(regressor(inputs), inputs.sum(dim=1))
    loss_history.append(loss)  # should be loss.item()
