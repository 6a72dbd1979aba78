"""Turning ``model_or_callable, *inputs, **kwargs`` into a call to measure: its device,
its thread count, the mode it runs in. Shared by every engine."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytest_torch.core import devices
from pytest_torch.core.pytrees import leaves

if TYPE_CHECKING:
    import torch


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    import torch

    for _, leaf in leaves(value):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def infer_device(target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
    """The device the work runs on: the inputs', else the module's parameters', else
    those of the tensors and modules a callable closes over (``lambda: model(x)``: a
    GPU model timed without synchronising its GPU would be timed at its launches only),
    else cpu."""
    import torch

    for tensor in _tensors((inputs, kwargs)):
        return tensor.device
    for held in (target, *_captured(target)):
        if isinstance(held, torch.Tensor):
            return held.device
        if isinstance(held, torch.nn.Module):
            for tensor in held.parameters():
                return tensor.device
            for tensor in held.buffers():
                return tensor.device
    return torch.device("cpu")


def _captured(target: Any) -> list[Any]:
    """What a callable holds: a closure's cells, a bound method's object, a
    ``functools.partial``'s arguments (one level: enough for a test's own lambda)."""
    held: list[Any] = []
    function = getattr(target, "__func__", target)
    for cell in getattr(function, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            held.append(cell.cell_contents)
    owner = getattr(target, "__self__", None)
    if owner is not None:
        held.append(owner)
    if isinstance(target, functools.partial):
        held.extend((*target.args, *target.keywords.values()))
    return held


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one (``cuda`` and ``cuda:0`` may be: an index left out
    matches any)."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def work_device(
    chosen: torch.device | str | None,
    target: Any,
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> torch.device:
    """The device to synchronise, time and measure a call on.

    - No device chosen for the test (``chosen`` None: it does not use ``torch_device``):
      inferred as before, from the inputs, else the module's parameters, else cpu
      (:func:`infer_device`).
    - A device chosen (the test's ``torch_device``, a benchmark case's device): that
      device, also when the inputs say nothing (a callable that closes over its
      tensors) or are spread over several devices, unless every input tensor (else,
      with no input tensors, every parameter and buffer of the module) is on one other
      device. Then that device, where the work really runs: a CPU tensor timed in a
      ``[cuda]`` test is timed on the CPU, not by synchronising an idle GPU.

    On a CPU-only machine every branch gives cpu, so measurements there do not change.
    """
    if chosen is None:
        return infer_device(target, inputs, kwargs)
    import torch

    device = devices.as_device(chosen)
    seen = {tensor.device for tensor in _tensors((inputs, kwargs))}
    if not seen and isinstance(target, torch.nn.Module):
        seen = {tensor.device for tensor in target.parameters()}
        seen.update(tensor.device for tensor in target.buffers())
    if len(seen) == 1:
        (only,) = seen
        if not _same_device(only, device):
            return only
    return device


def bind(target: Any, inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], object]:
    """A no-argument callable that runs the target once."""
    if not callable(target):
        raise TypeError(
            f"expected a torch.nn.Module or a callable to time, got {type(target).__name__}"
        )

    def run() -> object:
        return target(*inputs, **kwargs)

    return run


def run_context(target: Any) -> contextlib.AbstractContextManager[Any]:
    """Modules run in inference mode; callables run as given (a training step works)."""
    import torch

    if isinstance(target, torch.nn.Module):
        return torch.inference_mode()
    return contextlib.nullcontext()


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads (None: the count in force), restored after;
    yields the count in force."""
    import torch

    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield before
        return
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)
