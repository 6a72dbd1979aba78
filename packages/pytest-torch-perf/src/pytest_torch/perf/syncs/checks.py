"""Finding the operations that would make the host wait for a GPU.

The question asked of every operation is "would this synchronise if the tensors lived
on a GPU?", answered the same on every device:

- a dispatch mode sees every aten operation, including those inside composite ops,
  and judges it with ``rules``: host reads, data-dependent shapes, and the checks
  CUDA kernels make on the host (``multinomial``, ``linalg.inv``...). Reads that only
  CPU kernels make stay below the dispatcher and are not reported;
- the Python-level reads and moves the dispatcher cannot see (``.item()``, ``if t:``,
  ``print(t)``, ``.tolist()``, ``.cpu()``, ``.to(...)``, ``torch.tensor(...)``) are
  wrapped for the duration of the call and restored afterwards;
- each tensor has a placement: on the device, or on the host by design. A tensor on an
  accelerator is on the device. On a CPU-only run, tensors that existed before the call
  (inputs, parameters, buffers, module attributes) are on the device, except optimizer
  step counters and a dataset's tensors; tensors made inside the call follow the call
  that made them (a factory without a device, ``.cpu()`` and ``.to("cpu")`` make host
  tensors; ``.to(x.device)`` keeps a tensor where it is).

On CUDA the backend's own sync check is armed as well; what it reports is merged into the
operation already found (one entry, at the user's line), or added as ``cuda sync``.
"""

from __future__ import annotations

import contextlib
import threading
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from pytest_torch.core.sites import Site
from pytest_torch.perf.syncs.dispatch import dispatch_mode
from pytest_torch.perf.syncs.events import SyncEvent, format_failure
from pytest_torch.perf.syncs.recorder import (
    ACTIVE,
    LOCK,
    Pending,
    Recorder,
    current,
    is_sync_warning,
    tensors,
)
from pytest_torch.perf.syncs.rules import SYNC_OPERATIONS
from pytest_torch.perf.syncs.wrappers import install, uninstall

__all__ = ["SYNC_OPERATIONS", "SyncEvent", "assert_no_host_sync", "find_host_syncs"]


#: one checked call at a time per process (nested ones in the same thread are fine):
#: warnings.catch_warnings and the wrappers are process-wide
_CALLS = threading.RLock()


def _roots(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """What the call can reach directly: its arguments, closure, bound object and globals."""
    roots: list[Any] = [fn, *args, *kwargs.values()]
    target = getattr(fn, "__func__", fn)
    roots.append(getattr(fn, "__self__", None))
    for cell in getattr(target, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            roots.append(cell.cell_contents)
    code = getattr(target, "__code__", None)
    names = getattr(target, "__globals__", {})
    if code is not None:
        roots += [names[n] for n in code.co_names if n in names]
    expanded = list(roots)
    for root in roots:
        if isinstance(root, (list, tuple)):
            expanded += list(root)
        elif isinstance(root, dict):
            expanded += list(root.values())
        elif hasattr(root, "__dict__") and not isinstance(root, (type, types.ModuleType)):
            expanded += list(vars(root).values())
    return expanded


def _prepare(recorder: Recorder, roots: list[Any]) -> None:
    """Placements of what existed before the call.

    The tensors of a dataset or data loader live on the host (batches come out of them
    there); everything else that existed is taken as on the device, module attributes
    included (caches built on ``x.device``, torchmetrics states moved by ``_apply``).
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    seen: set[int] = set()
    for root in roots:
        if isinstance(root, torch.Tensor) and root.device.type not in ("cpu", "meta"):
            recorder.placements.accelerated = True
        dataset = root.dataset if isinstance(root, DataLoader) else root
        if isinstance(dataset, Dataset):
            for tensor in tensors(vars(dataset).values()):
                recorder.placements.mark(tensor, False)
        if not isinstance(root, torch.nn.Module) or id(root) in seen:
            continue
        for module in root.modules():
            seen.add(id(module))
            for parameter in module.parameters(recurse=False):
                if parameter.device.type not in ("cpu", "meta"):
                    recorder.placements.accelerated = True
                    return


def _step_counters_on_host(recorder: Recorder) -> Callable[..., None]:
    """An optimizer pre-step hook: step counters live on the host unless capturable/fused."""
    import torch

    def hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if current() is not recorder:
            return
        for group in optimizer.param_groups:
            if group.get("capturable") or group.get("fused"):
                continue
            for parameter in group["params"]:
                step = optimizer.state.get(parameter, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device.type == "cpu":
                    recorder.placements.mark(step, False)

    return hook


def _validate_allow(allow: Iterable[str] | str) -> set[str]:
    if isinstance(allow, str):
        names = {allow}
    else:
        try:
            names = set(allow)
        except TypeError:
            raise TypeError(
                f"assert_no_host_sync: allow= takes operation names (a string or a list of"
                f" them), got {type(allow).__name__}; expected names from:"
                f" {', '.join(SYNC_OPERATIONS)}"
            ) from None
    wrong = sorted(repr(n) for n in names if not isinstance(n, str))
    if wrong:
        raise TypeError(
            f"assert_no_host_sync: allow= takes operation names, got {', '.join(wrong)};"
            f" expected names from: {', '.join(SYNC_OPERATIONS)}"
        )
    unknown = names - set(SYNC_OPERATIONS)
    if unknown:
        raise ValueError(
            f"assert_no_host_sync: unknown operation(s) in allow=: {sorted(unknown)};"
            f" expected names from: {', '.join(SYNC_OPERATIONS)}"
        )
    return names


def find_host_syncs(
    fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[Any, list[SyncEvent]]:
    """Run ``fn(*args, **kwargs)``; return its result and what would sync on a GPU."""
    with _CALLS:
        return _find_host_syncs(fn, args, kwargs)


def _find_host_syncs(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, list[SyncEvent]]:
    import torch
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    recorder = Recorder()
    _prepare(recorder, _roots(fn, args, kwargs))
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        recorder.arm_cuda()
    hook = register_optimizer_step_pre_hook(_step_counters_on_host(recorder))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            recorder.caught = caught
            with LOCK:
                if not ACTIVE:
                    install()
                ACTIVE.setdefault(recorder.thread, []).append(recorder)
            try:
                with dispatch_mode(recorder):
                    result = fn(*args, **kwargs)
            finally:
                with LOCK:
                    stack = ACTIVE[recorder.thread]
                    stack.remove(recorder)
                    if not stack:
                        del ACTIVE[recorder.thread]
                    if not ACTIVE:
                        uninstall()
    finally:
        hook.remove()
        if recorder.cuda_mode is not None:
            torch.cuda.set_sync_debug_mode(recorder.cuda_mode)
    for warning in recorder.caught:
        if is_sync_warning(warning):
            record = Pending(
                "cuda sync",
                Site(warning.filename, warning.lineno),
                "cuda",
                confirmed=True,
            )
            recorder.pending.append(record)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return result, recorder.events()


def assert_no_host_sync(
    fn: Callable[..., Any], *args: Any, allow: Iterable[str] | str = (), **kwargs: Any
) -> Any:
    """Run ``fn(*args, **kwargs)`` and fail if it would make the host wait for a GPU.

    Lists every synchronising operation with the line of your code that led to it, why
    it waits on a GPU and the sync-free spelling. On CPU it reports what would
    synchronise if the tensors lived on a GPU. ``allow`` accepts known ones by name
    (``allow=("item",)``); see ``SYNC_OPERATIONS``. Returns what ``fn`` returned.
    """
    __tracebackhide__ = True
    allowed = _validate_allow(allow)
    result, events = find_host_syncs(fn, *args, **kwargs)
    reported = [event for event in events if event.operation not in allowed]
    if reported:
        raise AssertionError(format_failure(reported, allowed))
    return result
