"""Test tensors made the same way on every device: ``make_tensor``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def resolve_dtype(dtype: Any) -> torch.dtype:
    """A ``torch.dtype`` from a dtype or its name (``"bfloat16"``, ``"torch.float16"``)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        candidate = getattr(torch, dtype.removeprefix("torch."), None)
        if isinstance(candidate, torch.dtype):
            return candidate
    raise TypeError(
        f"make_tensor: dtype must be a torch.dtype or its name such as 'float32' or"
        f" 'bfloat16', got {dtype!r}"
    )


def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    __tracebackhide__ = True
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = tuple(shape[0])
    if not all(isinstance(size, int) and size >= 0 for size in shape):
        raise TypeError(
            f"make_tensor: the shape must be non-negative integers, as make_tensor(2, 3)"
            f" or make_tensor((2, 3)); got {shape!r}"
        )
    return tuple(shape)


def tensor_factory(default_device: torch.device | str) -> Callable[..., torch.Tensor]:
    """The ``make_tensor`` callable for one test, creating tensors on ``default_device``."""

    def make_tensor(
        *shape: Any,
        dtype: Any = None,
        device: torch.device | str | None = None,
        low: float | None = None,
        high: float | None = None,
        requires_grad: bool = False,
        **kwargs: Any,
    ) -> torch.Tensor:
        __tracebackhide__ = True  # a bad shape or dtype is the caller's line, not ours
        import torch

        return torch.testing.make_tensor(
            _shape(shape),
            dtype=resolve_dtype(torch.float32 if dtype is None else dtype),
            device=default_device if device is None else device,
            low=low,
            high=high,
            requires_grad=requires_grad,
            **kwargs,
        )

    return make_tensor
