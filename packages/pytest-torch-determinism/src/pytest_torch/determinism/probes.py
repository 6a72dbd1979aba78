"""What a diagnosis looks at besides the outputs: the state a call changes, the random
ops it runs, and the submodule whose output first differs between two runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pytest_torch.determinism.outputs import Leaves, differences, freeze

if TYPE_CHECKING:
    import torch


class TensorState:
    """A copy of named tensors (a module's parameters and buffers, a call's inputs)
    that can tell which of them changed, and put them back."""

    def __init__(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.tensors = list(named)
        self.saved = [(name, tensor.detach().clone()) for name, tensor in self.tensors]

    def changed(self) -> list[str]:
        found = []
        for (name, tensor), (_, saved) in zip(self.tensors, self.saved, strict=True):
            if differences([(name, saved)], [(name, tensor.detach())]):
                found.append(name)
        return found

    def restore(self) -> None:
        import torch

        with torch.no_grad():
            for (_, tensor), (_, saved) in zip(self.tensors, self.saved, strict=True):
                if tensor.shape == saved.shape:
                    tensor.copy_(saved)
                else:  # a buffer replaced by one of another shape
                    tensor.data = saved.clone()


def module_of(target: Any) -> torch.nn.Module | None:
    """The module behind ``target``: itself, or the module a bound method belongs to."""
    import torch

    if isinstance(target, torch.nn.Module):
        return target
    owner = getattr(target, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def state_of(module: torch.nn.Module | None) -> TensorState | None:
    if module is None:
        return None
    return TensorState(
        [(f"parameter `{n}`", t) for n, t in module.named_parameters()]
        + [(f"buffer `{n}`", t) for n, t in module.named_buffers()]
    )


def input_state(inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorState:
    """The tensors among a call's arguments, to see whether the call writes into them."""
    leaves = _tensor_leaves(inputs, "inputs") + _tensor_leaves(kwargs, "kwargs")
    return TensorState((f"input `{path}`", tensor) for path, tensor in leaves)


def _tensor_leaves(value: Any, path: str) -> list[tuple[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, (list, tuple)):
        return [
            leaf for i, item in enumerate(value) for leaf in _tensor_leaves(item, f"{path}[{i}]")
        ]
    if isinstance(value, dict):
        return [
            leaf for k, item in value.items() for leaf in _tensor_leaves(item, f"{path}[{k!r}]")
        ]
    return []


def describe_module(module: torch.nn.Module, name: str) -> str:
    return f"`{name}` ({type(module).__name__})" if name else f"the model ({type(module).__name__})"


@contextlib.contextmanager
def module_names(module: torch.nn.Module | None) -> Iterator[list[str]]:
    """Keep a stack of the submodules running (their names), via forward hooks."""
    stack: list[str] = []
    if module is None:
        yield stack
        return
    handles = []
    for name, sub in module.named_modules():
        label = describe_module(sub, name)

        def enter(_m: Any, _args: Any, label: str = label) -> None:
            stack.append(label)

        def leave(_m: Any, _args: Any, _out: Any) -> None:
            if stack:
                stack.pop()

        handles.append(sub.register_forward_pre_hook(enter))
        handles.append(sub.register_forward_hook(leave))
    try:
        yield stack
    finally:
        for handle in handles:
            handle.remove()


def _recording_mode(on_call: Callable[[Any, Any], None]) -> Any:
    """A torch dispatch mode that shows every aten op and its result to ``on_call``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    base: Any = TorchDispatchMode  # untyped in torch: subclass it as Any

    class _Recording(base):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            result = func(*args, **(kwargs or {}))
            on_call(func, result)
            return result

    return _Recording()


def random_ops(run: Callable[[], object], module: torch.nn.Module | None) -> list[str]:
    """The random ops (torch's ``nondeterministic_seeded`` tag) one run calls, each with
    the innermost submodule it ran in."""
    import torch

    seen: list[str] = []
    with module_names(module) as stack:

        def note(func: Any, _result: Any) -> None:
            if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
                where = f" in {stack[-1]}" if stack else ""
                name = f"{func.overloadpacket.__name__}{where}"
                if name not in seen:
                    seen.append(name)

        with _recording_mode(note):
            run()
    return seen


def module_outputs(run: Any, module: torch.nn.Module) -> list[tuple[str, Leaves]]:
    """Every submodule call of one run, in the order the calls finished, with its output."""
    recorded: list[tuple[str, Leaves]] = []
    handles = []
    for name, sub in module.named_modules():
        label = describe_module(sub, name)

        def record(_m: Any, _args: Any, output: Any, label: str = label) -> None:
            recorded.append((label, freeze(output)))

        handles.append(sub.register_forward_hook(record))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return recorded


def first_divergence(
    first: list[tuple[str, Leaves]], second: list[tuple[str, Leaves]]
) -> str | None:
    """The first submodule call whose output differs between two recorded runs."""
    for (label, a), (other, b) in zip(first, second, strict=False):
        if label != other:
            return f"{label} (the two runs called different submodules from here)"
        if differences(a, b):
            return label
    return None


#: ops that hand out memory nobody wrote: what deterministic mode's fill covers
_EMPTY_OPS = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided")


def uninitialised_blocks(run: Callable[[], object]) -> list[tuple[str, int]]:
    """(device, bytes) of every tensor one run creates without writing it (torch.empty
    and friends, called from Python or from composite ops)."""
    import torch

    blocks: list[tuple[str, int]] = []

    def note(func: Any, result: Any) -> None:
        if func.overloadpacket.__name__ in _EMPTY_OPS and isinstance(result, torch.Tensor):
            blocks.append((str(result.device), int(result.untyped_storage().nbytes())))

    with _recording_mode(note):
        run()
    return blocks


def poison(blocks: list[tuple[str, int]]) -> None:
    """Write a pattern into blocks of these sizes and free them, so the allocator hands
    the pattern, not an earlier NaN fill, to the next torch.empty of the same size."""
    import torch

    held = [torch.full((size,), 0x3F, dtype=torch.uint8, device=device) for device, size in blocks]
    del held
