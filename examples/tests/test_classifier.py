"""Tests of the image classifier, on every available device."""

from __future__ import annotations

import pytest
import torch

from pytest_torch import assert_close


def test_logits_have_one_row_per_image(classifier, make_tensor, torch_device):
    images = make_tensor(8, 1, 28, 28)
    with torch.no_grad():
        logits = classifier(images)
    assert logits.shape == (8, 10)
    assert logits.device.type == torch_device.type


def test_batching_does_not_change_predictions(classifier, make_tensor):
    images = make_tensor(4, 1, 28, 28)
    with torch.no_grad():
        together = classifier(images)
        one_by_one = torch.cat([classifier(image[None]) for image in images])
    # batched and single-image kernels may round differently: compare with tolerances
    assert_close(together, one_by_one, rtol=1e-4, atol=1e-5)


def test_eval_mode_is_deterministic(classifier, make_tensor):
    images = make_tensor(2, 1, 28, 28)
    with torch.no_grad():
        assert_close(classifier(images), classifier(images), rtol=0, atol=0)


def test_dropout_is_active_in_training(make_tensor, torch_device, torch_seed):
    from models import TinyCNN

    model = TinyCNN().to(torch_device).train()
    images = make_tensor(2, 1, 28, 28)
    assert not torch.equal(model(images), model(images))


def test_tiny_input_noise_does_not_flip_predictions(classifier, make_tensor, torch_seed):
    images = make_tensor(16, 1, 28, 28)
    noisy = images + 1e-4 * torch.randn_like(images)  # seeded by torch_seed
    with torch.no_grad():
        assert torch.equal(classifier(images).argmax(1), classifier(noisy).argmax(1))


@pytest.mark.torch_devices("cuda")
def test_half_precision_inference_on_gpu(classifier, make_tensor):
    images = make_tensor(8, 1, 28, 28)
    with torch.no_grad():
        reference = classifier(images)
        with torch.autocast("cuda", dtype=torch.float16):
            low = classifier(images)
    assert_close(low.float(), reference, rtol=1e-2, atol=1e-2)
