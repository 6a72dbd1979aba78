"""Naming a leak's culprits: the line that created a tensor, and what keeps it alive.

:class:`CreationSites` is a torch function mode that notes, for every tensor a torch
call returns, the user's line on the stack (core's finder, :mod:`pytest_torch.core.sites`:
outside torch, this family, the standard library and pytest; past an installed library,
whose line goes with it). It costs a frame walk per torch call, so the leak check uses
it for one extra run only, once a leak is already proven. :func:`describe_holder`
follows the garbage collector's referrers up from a tensor to something with a name: a
module global, an attribute, a variable captured by a closure, a function's default
argument, a ``functools.lru_cache`` (and where the cached function lives). Keys are
named by a short repr, a tensor by its shape and dtype (never its numbers).
:func:`find_holder` also says what kind of holder it is, so the report can give advice
that fits.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core.sites import Site, site_of

if TYPE_CHECKING:
    import torch

#: how far up the referrers a holder is looked for
MAX_DEPTH = 4
#: how much of a dict key's repr a holder's name shows
MAX_KEY_CHARS = 40


class Holder(NamedTuple):
    """Who keeps a tensor (or a graph node) alive."""

    #: "list `history` in module `train`", "default argument `cache` of function `f`"
    text: str
    #: the type of the per-step structure (a dict, a tuple) the object sits in, when that
    #: structure is itself kept in a growing container: outputs retained per step
    structure: str | None = None


def _make_mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class _CreationSites(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.sites: dict[int, tuple[weakref.ref[Any], Site]] = {}

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            result = func(*args, **(kwargs or {}))
            if not _compiling():  # torch.compile traces modes: it must not trace the walk
                self._note(result)
            return result

        def _note(self, result: Any) -> None:
            import torch

            outputs: Iterable[Any] = result if isinstance(result, (tuple, list)) else (result,)
            site: Site | None = None
            for output in outputs:
                if not isinstance(output, torch.Tensor):
                    continue
                known = self.sites.get(id(output))
                if known is not None and known[0]() is output:
                    continue  # an in-place op returns a tensor made elsewhere
                if site is None:
                    site = site_of(sys._getframe(2))
                    if site is None:
                        return
                try:
                    self.sites[id(output)] = (weakref.ref(output), site)
                except TypeError:  # not weak-referenceable
                    continue

        def site_of(self, tensor: torch.Tensor) -> Site | None:
            known = self.sites.get(id(tensor))
            if known is None or known[0]() is not tensor:
                return None
            return known[1]

    return _CreationSites


_mode_class: type | None = None


def _compiling() -> bool:
    import torch

    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def creation_sites() -> Any:
    """A fresh torch function mode recording where tensors are created (``with`` it)."""
    global _mode_class
    if _mode_class is None:
        _mode_class = _make_mode_class()
    return _mode_class()


def _module_of(namespace: dict[Any, Any]) -> str | None:
    """The module name when ``namespace`` is a module's globals."""
    name = namespace.get("__name__")
    if isinstance(name, str) and "__builtins__" in namespace:
        return _short_module(name)
    for module_name, module in list(sys.modules.items()):
        if getattr(module, "__dict__", None) is namespace:
            return module_name
    return None


def short_repr(obj: object, limit: int = MAX_KEY_CHARS) -> str:
    """A name for a dict key that fits in a line: strings as they are, tensors by shape
    and dtype (printing one would dump its numbers), anything else as a cut repr."""
    if isinstance(obj, str):
        text = obj
    elif _is_tensor(obj):
        text = _describe_tensor(obj)
    else:
        try:
            text = repr(obj)
        except Exception:  # a key whose repr fails is still a key
            text = f"<{_kind(obj)} object>"
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _describe_tensor(tensor: Any) -> str:
    try:
        layout = str(tensor.layout).removeprefix("torch.")
        dtype = str(tensor.dtype).removeprefix("torch.")
        if getattr(tensor, "is_nested", False):
            return f"nested tensor of {tensor.size(0)} {dtype}"
        kind = "tensor" if layout == "strided" else f"{layout} tensor"
        return f"{kind} {list(tensor.shape)} {dtype}"
    except Exception:  # a tensor subclass that cannot describe itself
        return f"<{_kind(tensor)}>"


def _short_module(name: str) -> str:
    # pytest's importlib mode names test modules after their path
    # ("packages.my-lib.tests.test_train"): the last part is the one people know
    if not all(part.isidentifier() for part in name.split(".")):
        return name.rpartition(".")[2]
    return name


def _key_in(mapping: dict[Any, Any], value: object) -> str | None:
    for key, item in list(mapping.items()):
        if item is value:
            return short_repr(key)
    return None


def _is_key_of(mapping: dict[Any, Any], value: object) -> bool:
    # by identity: ``value in mapping`` would call a tensor's __eq__
    return any(key is value for key in list(mapping))


def _kind(obj: object) -> str:
    return type(obj).__name__


def describe_holder(target: object, ignore: Iterable[object] = ()) -> str | None:
    """A readable answer to "who keeps ``target`` alive?", or None when nothing with a
    name could be found within :data:`MAX_DEPTH` referrers."""
    holder = find_holder(target, ignore)
    return None if holder is None else holder.text


def find_holder(target: object, ignore: Iterable[object] = ()) -> Holder | None:
    """Like :func:`describe_holder`, also saying whether ``target`` sits in a per-step
    structure (a dict or tuple of outputs) that a container keeps."""
    ignored = {id(obj) for obj in ignore}
    text = _describe(target, ignored, 0)
    if text is None:
        return None
    return Holder(text, _structure_of(target, ignored))


def _structure_of(target: object, ignored: set[int]) -> str | None:
    """The type of a dict/tuple/list holding ``target`` that is itself an element of a
    list, deque or plain dict: ``outputs.append({"logits": out, "loss": loss})``."""
    holders = _referrers(target, ignored)
    ignored = ignored | {id(holders)}
    for inner in holders:
        if not isinstance(inner, (dict, list, tuple)) or _is_namespace(inner, ignored):
            continue
        for outer in _referrers(inner, ignored | {id(inner)}):
            if _is_deque(outer) or isinstance(outer, list):
                return _kind(inner)
            if (
                isinstance(outer, dict)
                and _key_in(outer, inner) is not None
                and not _is_namespace(outer, ignored | {id(inner)})
            ):
                return _kind(inner)
    return None


def _is_namespace(obj: object, ignored: set[int]) -> bool:
    """A module's globals or an object's ``__dict__``: holds names, not steps."""
    if not isinstance(obj, dict):
        return False
    return _module_of(obj) is not None or _instance_with(obj, ignored | {id(obj)}) is not None


def _referrers(target: object, ignored: set[int]) -> list[object]:
    found = []
    for ref in gc.get_referrers(target):
        if id(ref) in ignored or isinstance(ref, types.FrameType):
            continue
        found.append(ref)
    return found


def _describe(target: object, ignored: set[int], depth: int) -> str | None:
    if depth >= MAX_DEPTH:
        return None
    holders = _referrers(target, ignored)
    ignored = ignored | {id(holders)}
    # names first: a module global or an attribute says the most
    for ref in holders:
        if isinstance(ref, dict):
            module = _module_of(ref)
            key = _key_in(ref, target)
            if module is not None and key is not None:
                return f"global `{key}` in module `{module}`"
    for ref in holders:
        if isinstance(ref, dict):
            text = _describe_dict(ref, target, ignored | {id(ref)}, depth)
            if text:
                return text
        elif isinstance(ref, types.CellType):
            text = _describe_cell(ref, ignored)
            if text:
                return text
        elif isinstance(ref, (list, tuple, set, frozenset)) or _is_deque(ref):
            if isinstance(ref, tuple):
                text = _describe_default(ref, target, ignored | {id(ref)})
                if text:
                    return text
            inner = _describe(ref, ignored | {id(ref)}, depth + 1)
            if inner:
                return _container(ref, inner)
        elif _is_lru_cache(ref):  # a bounded cache's entries hold its results
            return _lru_cache_text(ref, ignored, depth)
        else:
            text = _describe_attribute(ref, target, ignored | {id(ref)}, depth)
            if text:
                return text
    return None


def _describe_attribute(owner: object, target: object, ignored: set[int], depth: int) -> str | None:
    """``owner.name is target``: objects keep attributes in a dict Python may not show
    to the collector, so the owner itself refers to the value."""
    try:
        namespace = vars(owner)
    except TypeError:
        return None
    key = _key_in(namespace, target)
    if key is None:
        return None
    where = _describe(owner, ignored, depth + 1)
    return f"attribute `{key}` of a `{_kind(owner)}` object" + (f" ({where})" if where else "")


def _is_deque(obj: object) -> bool:
    import collections

    return isinstance(obj, collections.deque)


def _container(container: object, holder: str) -> str:
    kind = _kind(container)
    if holder.startswith(("global ", "variable ")):
        # "global `history` in module `m`" -> "list `history` in module `m`"
        return f"{kind} {holder.split(' ', 1)[1]}"
    if holder.startswith(("attribute ", "default argument ")):
        return f"{kind} in {holder}"
    return f"a {kind} in {holder}"


def _instance_with(namespace: dict[Any, Any], ignored: set[int]) -> object | None:
    """The object whose ``__dict__`` is ``namespace`` (a class's, behind its read-only
    proxy, included), if any."""
    for owner in _referrers(namespace, ignored):
        found = getattr(owner, "__dict__", None)
        if found is namespace:
            return owner
        if isinstance(owner, type) and isinstance(found, types.MappingProxyType):
            try:
                if len(found) == len(namespace) and all(
                    found.get(key) is value for key, value in list(namespace.items())
                ):
                    return owner
            except Exception:  # an odd metaclass: not this one
                continue
    return None


def _owner_name(owner: object) -> str:
    if isinstance(owner, type):
        return f"class `{owner.__qualname__}`"
    return f"a `{_kind(owner)}` object"


def _owners(mapping: dict[Any, Any], ignored: set[int]) -> list[object]:
    """Objects that hold ``mapping`` as an attribute (directly or through their dict)."""
    found = []
    for ref in _referrers(mapping, ignored):
        if isinstance(ref, dict):
            owner = _instance_with(ref, ignored | {id(ref)})
            if owner is not None:
                found.append(owner)
        else:
            found.append(ref)
    return found


def _describe_dict(
    mapping: dict[Any, Any], target: object, ignored: set[int], depth: int
) -> str | None:
    key = _key_in(mapping, target)
    if key is None:
        if not _is_key_of(mapping, target):
            return None
        inner = _describe(mapping, ignored, depth + 1)
        if inner is None:
            return None
        if inner.startswith(("global ", "variable ")):
            return f"keys of dict {inner.split(' ', 1)[1]}"
        return f"keys of a dict in {inner}"
    for function in _referrers(mapping, ignored):
        if isinstance(function, types.FunctionType) and function.__kwdefaults__ is mapping:
            return f"default argument `{key}` of function `{function.__qualname__}`"
    instance = _instance_with(mapping, ignored)
    if instance is not None:
        if isinstance(instance, type):  # a class lives as long as its module: its name says it
            module = _short_module(str(getattr(instance, "__module__", "?")))
            return f"attribute `{key}` of {_owner_name(instance)} in module `{module}`"
        where = _describe(instance, ignored | {id(instance)}, depth + 1)
        suffix = f" ({where})" if where else ""
        return f"attribute `{key}` of {_owner_name(instance)}{suffix}"
    for owner in _owners(mapping, ignored):
        registry = _module_registry(owner, mapping)
        if registry is not None:
            where = _describe(owner, ignored | {id(owner)}, depth + 1)
            suffix = f" ({where})" if where else ""
            return f"{registry} `{key}` of a `{_kind(owner)}` module{suffix}"
    for owner in _referrers(mapping, ignored):
        if _is_lru_cache(owner) and any(ref is mapping for ref in gc.get_referents(owner)):
            return _lru_cache_text(owner, ignored, depth)
    inner = _describe(mapping, ignored, depth + 1)
    if inner is None:
        return None
    if inner.startswith(("global ", "variable ")):
        return f"key `{key}` of dict {inner.split(' ', 1)[1]}"
    return f"key `{key}` of a dict in {inner}"


def _is_lru_cache(owner: object) -> bool:
    """A ``functools.lru_cache`` wrapper: it keeps its results out of sight of ``vars``
    (in its cache dict when unbounded, in its own entries when bounded), but the
    collector sees them."""
    kind = type(owner)
    return kind.__name__ == "_lru_cache_wrapper" and kind.__module__ == "functools"


def _lru_cache_text(wrapper: object, ignored: set[int], depth: int) -> str:
    where = _describe(wrapper, ignored | {id(wrapper)}, depth + 1)
    suffix = f" ({where})" if where else ""
    return f"the cache of `{getattr(wrapper, '__qualname__', '?')}` (functools.lru_cache){suffix}"


def _module_registry(owner: object, mapping: dict[Any, Any]) -> str | None:
    """ "buffer"/"parameter" when ``mapping`` is a torch module's registry of them."""
    namespace = getattr(owner, "__dict__", None)
    if not isinstance(namespace, dict):
        return None
    if namespace.get("_buffers") is mapping:
        return "buffer"
    if namespace.get("_parameters") is mapping:
        return "parameter"
    return None


def _describe_cell(cell: types.CellType, ignored: set[int]) -> str | None:
    for ref in _referrers(cell, ignored):
        if isinstance(ref, tuple):
            for function in _referrers(ref, ignored | {id(ref)}):
                if isinstance(function, types.FunctionType) and function.__closure__ is ref:
                    # by identity: cells compare by their contents, and tensors' == is no bool
                    index = next(i for i, c in enumerate(ref) if c is cell)
                    name = function.__code__.co_freevars[index]
                    return f"variable `{name}` captured by function `{function.__qualname__}`"
    return None


def _describe_default(defaults: tuple[Any, ...], target: object, ignored: set[int]) -> str | None:
    """``def f(x, cache=[])``: ``defaults`` is ``f.__defaults__`` and ``target`` one of them."""
    for function in _referrers(defaults, ignored):
        if not isinstance(function, types.FunctionType) or function.__defaults__ is not defaults:
            continue
        code = function.__code__
        names = code.co_varnames[: code.co_argcount][-len(defaults) :]
        for name, value in zip(names, defaults, strict=False):
            if value is target:
                return f"default argument `{name}` of function `{function.__qualname__}`"
    return None
