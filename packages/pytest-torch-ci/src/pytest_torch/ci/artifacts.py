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
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

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


def write(directory: Path, node_id: str, pairs: Sequence[Pair]) -> list[Path]:
    """Save each pair (heatmap when the shapes match, tensors always); the paths."""
    import torch

    from pytest_torch.ci.heatmaps import draw

    folder = directory / sanitise(node_id)
    folder.mkdir(parents=True, exist_ok=True)
    first = 1 + len(list(folder.glob("*.pt")))  # a test may fail more than once (reruns)
    written = []
    for number, pair in enumerate(pairs, start=first):
        stem = f"{number}-{sanitise(pair.path, 60)}"
        tensors = folder / f"{stem}.pt"
        actual, expected = pair.actual.detach().cpu(), pair.expected.detach().cpu()
        torch.save({"actual": actual, "expected": expected, "path": pair.path}, tensors)
        if actual.shape == expected.shape and actual.numel():
            written.append(
                draw(actual, expected, folder / f"{stem}.png", name=pair.path, rtol=pair.rtol,
                     atol=pair.atol)
            )  # fmt: skip
        written.append(tensors)
    return written


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
            except (KeyError, IndexError, TypeError):
                continue
            if isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor):
                path = "output" + "".join(f"[{key!r}]" for key in key_path)
                pairs.append(Pair(path, actual, expected, names.get("rtol"), names.get("atol")))
        return pairs
    return []


def describe(paths: Sequence[Path], root: Path) -> str:
    shown = []
    for path in paths:
        try:
            shown.append(str(path.relative_to(root)))
        except ValueError:
            shown.append(str(path))
    return "failure artifacts (heatmaps, tensors): " + ", ".join(shown)
