"""What a diagnosis looks at besides the outputs: the state a call changes, the random
ops it runs, and the submodule whose output first differs between two runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.determinism.outputs import (
    CannotCompare,
    Leaves,
    differences,
    freeze,
    tensors_in,
)

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
                if tensor.is_inference() and not torch.is_inference_mode_enabled():
                    continue  # cannot be written out of inference mode: never changed
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
    """The tensors among a call's arguments (in tuples, lists, dicts, named tuples and
    dataclasses), to see whether the call writes into them."""
    leaves = tensors_in(inputs, "inputs") + tensors_in(kwargs, "kwargs")
    return TensorState((f"input `{path}`", tensor) for path, tensor in leaves)


def describe_module(module: torch.nn.Module, name: str) -> str:
    return f"`{name}` ({type(module).__name__})" if name else f"the model ({type(module).__name__})"


@contextlib.contextmanager
def module_names(module: torch.nn.Module | None) -> Iterator[list[tuple[str, Any]]]:
    """Keep a stack of the submodules running (their names and the modules), via
    forward hooks."""
    stack: list[tuple[str, Any]] = []
    if module is None:
        yield stack
        return
    handles = []
    for name, sub in module.named_modules():
        label = describe_module(sub, name)

        def enter(m: Any, _args: Any, label: str = label) -> None:
            stack.append((label, m))

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


#: torch.nn.functional's dropout family (and torch.dropout), which draw at random
#: only when called with training=True (their default)
_DROPOUT_FUNCTIONS = frozenset(
    (
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "feature_dropout",
    )
)


class RandomSource(NamedTuple):
    """One random op a run called, and what called it."""

    #: the aten op ("bernoulli_", "randn")
    op: str
    #: the innermost submodule it ran in (None: outside any)
    where: str | None
    #: None: not inside a dropout call; "module": a Dropout module in train mode;
    #: "functional": a dropout function called with training=True while the module
    #: calling it is in eval mode (model.eval() changes nothing); "functional-train":
    #: the same in a module in train mode; "function": outside any module
    dropout: str | None = None
    #: the dropout call, as the user wrote it ("F.dropout(..., training=True)")
    call: str | None = None

    @property
    def name(self) -> str:
        where = f" in {self.where}" if self.where else ""
        called = f", called by {self.call}" if self.dropout not in (None, "module") else ""
        return f"{self.op}{where}{called}"


def _dropout_training(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """The ``training`` argument of a dropout-family call (True when left out)."""
    for key in ("training", "train"):
        if key in kwargs:
            return bool(kwargs[key])
    return bool(args[2]) if len(args) > 2 else True


def _dropout_call(func: Any) -> str:
    module = getattr(func, "__module__", "") or ""
    prefix = "F" if module == "torch.nn.functional" else "torch"
    flag = "train" if prefix == "torch" else "training"
    return f"{prefix}.{func.__name__}(..., {flag}=True)"


def _dropout_kind(module: Any) -> str:
    import torch

    if module is None:
        return "function"
    if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.training:
        return "module"
    return "functional-train" if module.training else "functional"


def random_sources(run: Callable[[], object], module: torch.nn.Module | None) -> list[RandomSource]:
    """The random ops (torch's ``nondeterministic_seeded`` tag) one run calls, each with
    the innermost submodule it ran in and the dropout call behind it, if any."""
    import torch
    from torch.overrides import TorchFunctionMode

    seen: list[RandomSource] = []
    #: the dropout calls running now: (kind, call as written)
    dropouts: list[tuple[str, str]] = []
    with module_names(module) as stack:

        def note(func: Any, _result: Any) -> None:
            if torch.Tag.nondeterministic_seeded not in getattr(func, "tags", ()):
                return
            kind, call = dropouts[-1] if dropouts else (None, None)
            where = stack[-1][0] if stack else None
            source = RandomSource(func.overloadpacket.__name__, where, kind, call)
            if source not in seen:
                seen.append(source)

        base: Any = TorchFunctionMode  # untyped in torch: subclass it as Any

        class _Calls(base):  # type: ignore[misc]
            def __torch_function__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                kwargs = kwargs or {}
                name = getattr(func, "__name__", "")
                if name not in _DROPOUT_FUNCTIONS or not _dropout_training(func, args, kwargs):
                    return func(*args, **kwargs)
                dropouts.append(
                    (_dropout_kind(stack[-1][1] if stack else None), _dropout_call(func))
                )
                try:
                    return func(*args, **kwargs)
                finally:
                    dropouts.pop()

        with _Calls(), _recording_mode(note):
            run()
    return seen


def random_ops(run: Callable[[], object], module: torch.nn.Module | None) -> list[str]:
    """The names of the random ops one run calls (see :func:`random_sources`)."""
    return [source.name for source in random_sources(run, module)]


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
        try:
            if differences(a, b):
                return label
        except CannotCompare:  # a submodule output that cannot be compared: look further
            continue
    return None


#: ops that hand out memory nobody wrote (what deterministic mode's NaN fill covers, with
#: resize_, whose new bytes are handled apart)
_EMPTY_OPS = frozenset(
    ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided")
)
#: the byte each run of the uninitialised-memory probe writes into such memory: two runs
#: with different bytes differ exactly where the outputs depend on memory nobody wrote
#: (0x3F... is 0.747 as float32, 0xC1... is -24.2; bool memory gets 0 and 1 instead)
PATTERNS = (0x3F, 0xC1)


def pattern_name(pattern: int) -> str:
    return f"0x{PATTERNS[pattern]:02X}"


def _fill(tensor: Any, pattern: int, start: int = 0) -> None:
    """Write run ``pattern``'s byte into the storage of ``tensor`` from byte ``start``."""
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
        return
    if tensor.device.type == "meta":
        return
    try:
        storage = tensor.untyped_storage()
        # a wrapper subclass (DTensor, quantised tensors...) has a storage without
        # memory: data_ptr() raises, where writing through it would crash the process
        if storage.nbytes() <= start or storage.data_ptr() == 0:
            return
        # a bool holding any byte but 0 or 1 is undefined behaviour in torch's kernels
        byte = pattern % 2 if tensor.dtype == torch.bool else PATTERNS[pattern]
        raw = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        raw[start:].fill_(byte)
    except (RuntimeError, NotImplementedError):  # a subclass whose storage is not real memory
        return


def _filling_mode(pattern: int) -> Any:
    """A torch dispatch mode that fills the memory of every tensor an ``empty``-family op
    returns, and the bytes ``resize_`` adds, with run ``pattern``'s byte."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    base: Any = TorchDispatchMode  # untyped in torch: subclass it as Any

    class _Filling(base):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            name = func.overloadpacket.__name__
            grown_from = None
            if name == "resize_" and args and isinstance(args[0], torch.Tensor):
                grown_from = args[0].untyped_storage().nbytes()
            result = func(*args, **(kwargs or {}))
            # the mode is off inside this method: the fill is not seen by it
            if name in _EMPTY_OPS:
                _fill(result, pattern)
            elif grown_from is not None:
                _fill(args[0], pattern, start=grown_from)
            return result

    return _Filling()


@contextlib.contextmanager
def uninitialised_filled(pattern: int | None) -> Iterator[None]:
    """Run the block with memory from ``torch.empty`` and friends (called from Python or
    from composite ops) filled with the byte of run ``pattern`` (an index into
    :data:`PATTERNS`; None: as torch hands it out). This overwrites torch's own NaN fill
    of deterministic mode too, so the probe works with that mode on or off."""
    if pattern is None:
        yield
        return
    with _filling_mode(pattern):
        yield
