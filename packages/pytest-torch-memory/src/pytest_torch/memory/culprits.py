"""Naming a leak's culprits: the line that created a tensor, and what keeps it alive.

:class:`CreationSites` is a torch function mode that notes, for every tensor a torch
call returns, the first line outside torch (and outside this family) on the stack. It
costs a frame walk per torch call, so the leak check uses it for one extra run only,
once a leak is already proven. :func:`describe_holder` follows the garbage collector's
referrers up from a tensor to something with a name: a module global, an attribute, a
variable captured by a closure.
"""

from __future__ import annotations

import gc
import linecache
import os
import sys
import types
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch

#: how far up the referrers a holder is looked for
MAX_DEPTH = 4


class Site(NamedTuple):
    filename: str
    lineno: int
    function: str

    def describe(self, root: str | None = None) -> str:
        path = self.filename
        if root is not None:
            try:
                relative = os.path.relpath(path, root)
                if not relative.startswith(".."):
                    path = relative
            except ValueError:  # another drive on Windows
                pass
        source = linecache.getline(self.filename, self.lineno).strip()
        code = f": `{source}`" if source else ""
        return f"{path}:{self.lineno} in {self.function}(){code}"


def _library_dirs() -> tuple[str, ...]:
    import torch

    # every portion of the namespace: the family's packages may be installed apart
    namespace = sys.modules[__name__.partition(".")[0]]
    dirs = {os.path.dirname(torch.__file__), *(os.path.abspath(p) for p in namespace.__path__)}
    return tuple(os.path.join(d, "") for d in dirs)


def _make_mode_class() -> type:
    from torch.overrides import TorchFunctionMode

    class _CreationSites(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.sites: dict[int, tuple[weakref.ref[Any], Site]] = {}
            self.skip = _library_dirs()

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            result = func(*args, **(kwargs or {}))
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
                    site = self._caller()
                    if site is None:
                        return
                try:
                    self.sites[id(output)] = (weakref.ref(output), site)
                except TypeError:  # not weak-referenceable
                    continue

        def _caller(self) -> Site | None:
            frame: types.FrameType | None = sys._getframe(2)
            while frame is not None:
                filename = frame.f_code.co_filename
                if not filename.startswith(self.skip) and not filename.startswith("<"):
                    return Site(filename, frame.f_lineno, frame.f_code.co_name)
                frame = frame.f_back
            return None

        def site_of(self, tensor: torch.Tensor) -> Site | None:
            known = self.sites.get(id(tensor))
            if known is None or known[0]() is not tensor:
                return None
            return known[1]

    return _CreationSites


_mode_class: type | None = None


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
        # pytest's importlib mode names test modules after their path
        # ("packages.my-lib.tests.test_train"): the last part is the one people know
        if not all(part.isidentifier() for part in name.split(".")):
            return name.rpartition(".")[2]
        return name
    for module_name, module in list(sys.modules.items()):
        if getattr(module, "__dict__", None) is namespace:
            return module_name
    return None


def _key_in(mapping: dict[Any, Any], value: object) -> str | None:
    for key, item in mapping.items():
        if item is value:
            return str(key)
    return None


def _kind(obj: object) -> str:
    return type(obj).__name__


def describe_holder(target: object, ignore: Iterable[object] = ()) -> str | None:
    """A readable answer to "who keeps ``target`` alive?", or None when nothing with a
    name could be found within :data:`MAX_DEPTH` referrers."""
    ignored = {id(obj) for obj in ignore}
    return _describe(target, ignored, 0)


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
            inner = _describe(ref, ignored | {id(ref)}, depth + 1)
            if inner:
                return _container(ref, inner)
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
    if holder.startswith("attribute "):
        return f"{kind} in {holder}"
    return f"a {kind} in {holder}"


def _instance_with(namespace: dict[Any, Any], ignored: set[int]) -> object | None:
    """The object whose ``__dict__`` is ``namespace``, if any."""
    for owner in _referrers(namespace, ignored):
        if getattr(owner, "__dict__", None) is namespace:
            return owner
    return None


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
        return None
    instance = _instance_with(mapping, ignored)
    if instance is not None:
        where = _describe(instance, ignored | {id(instance)}, depth + 1)
        suffix = f" ({where})" if where else ""
        return f"attribute `{key}` of a `{_kind(instance)}` object{suffix}"
    for owner in _owners(mapping, ignored):
        registry = _module_registry(owner, mapping)
        if registry is not None:
            where = _describe(owner, ignored | {id(owner)}, depth + 1)
            suffix = f" ({where})" if where else ""
            return f"{registry} `{key}` of a `{_kind(owner)}` module{suffix}"
    inner = _describe(mapping, ignored, depth + 1)
    if inner is None:
        return None
    if inner.startswith(("global ", "variable ")):
        return f"key `{key}` of dict {inner.split(' ', 1)[1]}"
    return f"key `{key}` of a dict in {inner}"


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
                    index = ref.index(cell)
                    name = function.__code__.co_freevars[index]
                    return f"variable `{name}` captured by function `{function.__qualname__}`"
    return None
