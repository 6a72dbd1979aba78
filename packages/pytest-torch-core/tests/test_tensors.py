"""Unit tests of the make_tensor factory."""

from __future__ import annotations

import pytest
import torch

from pytest_torch.core.tensors import resolve_dtype, tensor_factory

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def test_shapes_dtypes_and_defaults():
    make = tensor_factory("cpu")
    x = make(2, 3)
    assert x.shape == (2, 3) and x.dtype == torch.float32 and x.device.type == "cpu"
    assert make((4, 5)).shape == (4, 5)
    assert make([6]).shape == (6,)
    assert make().shape == ()
    assert make(3, dtype="bfloat16").dtype == torch.bfloat16
    assert make(3, dtype=torch.int64, low=0, high=5).max() < 5
    assert make(2, requires_grad=True).requires_grad
    assert not make(4, 4, noncontiguous=True).is_contiguous()


def test_bad_arguments_are_explained():
    make = tensor_factory("cpu")
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype or its name"):
        make(2, dtype="float33")
    with pytest.raises(TypeError, match="non-negative integers"):
        make(2, -1)
    with pytest.raises(TypeError, match="non-negative integers"):
        make(2.5)


def test_resolve_dtype():
    assert resolve_dtype("torch.float16") is torch.float16
    assert resolve_dtype(torch.int8) is torch.int8
