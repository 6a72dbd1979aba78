"""Failure artifacts: for each tensor mismatch of a failing test, a heatmap PNG and the
two tensors (``.pt``), in ``DIR/<test id>/<n>-<name>.png``.

Mismatches come from two places: the family's ``assert_close`` announces them through
core's ``pytest_torch_tensor_mismatch`` hook, with the tensors; ``torch.testing.
assert_close`` raises a plain ``AssertionError``, so its tensors are read from its own
frame in the traceback (its ``actual``/``expected`` arguments, and the path of each
failing leaf it recorded).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_torch.core.files import replacing

if TYPE_CHECKING:
    import torch

#: longest folder name made from a test id (the rest is replaced by a hash)
MAX_NAME = 120


class Pair(NamedTuple):
    """One mismatching pair of tensors and where it sits in the compared outputs."""

    path: str
    actual: torch.Tensor
    expected: torch.Tensor
    rtol: float | None = None
    atol: float | None = None


def sanitise(text: str, limit: int = MAX_NAME) -> str:
    """A file-system-safe name (``test_x.py::test_y[cpu]`` -> ``test_x.py_test_y_cpu``)."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9._-]", "_", text)).strip("._") or "output"
    if len(name) > limit:
        import hashlib

        digest = hashlib.blake2b(text.encode(), digest_size=4).hexdigest()
        name = f"{name[: limit - 9]}-{digest}"
    return name


class Written(NamedTuple):
    """What :func:`write` saved, and a one-line note per thing it could not save."""

    paths: list[Path]
    notes: list[str]


def reason(error: BaseException) -> str:
    """``Type: first line of the message`` of an error, even when its ``str()`` raises."""
    try:
        text = str(error).strip()
    except Exception:
        text = "(its message could not be read)"
    first = text.splitlines()[0] if text else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _next_number(folder: Path) -> int:
    """1 + the highest ``<n>-`` prefix in the folder (a test may fail more than once)."""
    numbers = [0]
    for entry in folder.iterdir():
        head = entry.name.split("-", 1)[0]
        if head.isdigit():
            numbers.append(int(head))
    return max(numbers) + 1


def _for_saving(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy that holds only its own elements (a view would save its whole base)."""
    import torch

    tensor = tensor.detach()
    if tensor.device.type == "meta":
        return tensor
    tensor = tensor.cpu()
    if tensor.layout == torch.strided and not (tensor.is_nested or tensor.is_quantized):
        tensor = tensor.resolve_conj().resolve_neg().clone()
    return tensor


def _save_tensors(pair: Pair, path: Path) -> None:
    import torch

    content = {"actual": _for_saving(pair.actual), "expected": _for_saving(pair.expected)}
    with replacing(path) as temporary:
        torch.save({**content, "path": pair.path}, temporary)


def write(directory: Path, node_id: str, pairs: Sequence[Pair]) -> Written:
    """Save each pair: a heatmap where one is meaningful, the tensors always.

    Never raises for one pair: what could not be drawn or saved becomes a note. An
    OSError creating the folder itself is raised (nothing can be saved at all).
    """
    from pytest_torch.ci.heatmaps import NoPicture, draw

    folder = directory / sanitise(node_id)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    notes: list[str] = []
    with warnings.catch_warnings():
        # torch's "sparse CSR is in beta" and matplotlib's warnings are no news of the
        # user's test, and under -W error they would stop the picture
        warnings.simplefilter("ignore")
        for number, pair in enumerate(pairs, start=_next_number(folder)):
            stem = f"{number}-{sanitise(pair.path, 60)}"
            picture: str | None = None
            try:
                written.append(
                    draw(pair.actual, pair.expected, folder / f"{stem}.png", name=pair.path,
                         rtol=pair.rtol, atol=pair.atol)
                )  # fmt: skip
            except NoPicture as why:
                picture = str(why)
            except Exception as error:
                picture = f"no heatmap ({reason(error)})"
            tensors = folder / f"{stem}.pt"
            try:
                _save_tensors(pair, tensors)
                written.append(tensors)
                saved = "tensors saved"
            except Exception as error:
                saved = f"tensors not saved ({reason(error)})"
            if picture is not None or tensors not in written:
                notes.append(f"{pair.path}: {picture or 'heatmap saved'}; {saved}")
    return Written(written, notes)


def _frames(traceback: TracebackType | None) -> Iterator[Any]:
    while traceback is not None:
        yield traceback.tb_frame
        traceback = traceback.tb_next


def _leaf(value: Any, key_path: Sequence[Any]) -> Any:
    for key in key_path:
        value = value[key]
    return value


def from_torch_testing(error: BaseException) -> list[Pair]:
    """The mismatching tensor pairs of a failed ``torch.testing.assert_close``."""
    import torch

    for frame in _frames(error.__traceback__):
        code = frame.f_code
        if code.co_name != "assert_close" or not code.co_filename.endswith("_comparison.py"):
            continue
        names = frame.f_locals
        metas = names.get("error_metas") or []
        pairs = []
        for meta in metas:
            key_path = tuple(getattr(meta, "id", ()))
            try:
                actual = _leaf(names["actual"], key_path)
                expected = _leaf(names["expected"], key_path)
            except Exception:  # a container that changed, or one that raises on access
                continue
            if isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor):
                path = "output" + "".join(f"[{key!r}]" for key in key_path)
                pairs.append(Pair(path, actual, expected, names.get("rtol"), names.get("atol")))
        return pairs
    return []


def shown(paths: Sequence[Path], root: Path) -> list[str]:
    """The paths as the user sees them: relative to ``root`` where they are inside it."""
    texts = []
    for path in paths:
        try:
            texts.append(str(path.relative_to(root)))
        except ValueError:
            texts.append(str(path))
    return texts


def chain(error: BaseException) -> list[BaseException]:
    """The error, its causes and contexts, and the members of exception groups."""
    found: list[BaseException] = []
    todo = [error]
    while todo and len(found) < 100:
        current = todo.pop(0)
        if any(current is seen for seen in found):
            continue
        found.append(current)
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        try:
            members = getattr(current, "exceptions", ())
            todo += [e for e in members if isinstance(e, BaseException)]
        except Exception:  # an "exceptions" attribute of some other kind
            pass
    return found


def _announced_pairs(errors: Sequence[Any]) -> list[Pair]:
    return [
        Pair(m.path, m.actual, m.expected, m.rtol, m.atol)
        for error in errors
        for m in error.mismatches
        if m.actual is not None and m.expected is not None
    ]


def of_failure(error: BaseException | None, announced: Sequence[Any]) -> tuple[list[Pair], bool]:
    """The pairs to save for a failed test phase, and whether they were caught earlier.

    The failure's own mismatch when it is one (announced by ``assert_close``, or read
    from ``torch.testing.assert_close``'s frame), also when it is the cause or context
    of the error raised or inside an exception group. Otherwise the mismatches the
    phase announced and caught before it failed (``caught_earlier``), the best evidence
    left of why it failed. Nothing for a failure without an exception (a strict XPASS:
    the test did what it should, the mark is out of date).
    """
    if error is None:
        return [], False
    errors = chain(error)
    own = [a for a in announced if any(a is e for e in errors)]
    if own:
        return _announced_pairs(own), False
    for candidate in errors:
        found = from_torch_testing(candidate)
        if found:
            return found, False
    return _announced_pairs(announced), True
