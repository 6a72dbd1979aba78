"""torch's determinism switches: read them, set them, and put them back.

The switches are ``torch.use_deterministic_algorithms`` (and its warn-only mode),
``torch.backends.cudnn.deterministic`` and ``.benchmark``, and
``torch.utils.deterministic.fill_uninitialized_memory``. Together with the random
generators (``pytest_torch.core.seeding``) they are the global state a determinism
check touches, and :func:`preserved` restores all of it, also when a run raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

from pytest_torch.core import seeding

#: what torch says when an op has no deterministic implementation
NO_DETERMINISTIC_IMPLEMENTATION = "does not have a deterministic implementation"


class Flags(NamedTuple):
    deterministic: bool
    warn_only: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool
    fill_uninitialized_memory: bool


def current() -> Flags:
    import torch

    return Flags(
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        bool(torch.backends.cudnn.deterministic),
        bool(torch.backends.cudnn.benchmark),
        bool(torch.utils.deterministic.fill_uninitialized_memory),  # type: ignore[attr-defined]
    )


def apply(flags: Flags) -> None:
    import torch

    torch.use_deterministic_algorithms(flags.deterministic, warn_only=flags.warn_only)
    torch.backends.cudnn.deterministic = flags.cudnn_deterministic
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark
    torch.utils.deterministic.fill_uninitialized_memory = flags.fill_uninitialized_memory  # type: ignore[attr-defined]


def deterministic(*, warn_only: bool = False, fill_uninitialized_memory: bool = True) -> Flags:
    """The switches of deterministic mode."""
    return Flags(True, warn_only, True, False, fill_uninitialized_memory)


@contextlib.contextmanager
def preserved() -> Iterator[None]:
    """Restore the determinism switches and every random generator on exit."""
    flags = current()
    rng = seeding.capture()
    try:
        yield
    finally:
        apply(flags)
        seeding.restore(rng)


@contextlib.contextmanager
def using(flags: Flags | None) -> Iterator[None]:
    """Run the block with ``flags`` (None: as they are), restoring them afterwards."""
    if flags is None:
        yield
        return
    before = current()
    apply(flags)
    try:
        yield
    finally:
        apply(before)


def op_without_deterministic_implementation(error: BaseException) -> str | None:
    """The op named in torch's "does not have a deterministic implementation" error."""
    text = str(error)
    if NO_DETERMINISTIC_IMPLEMENTATION not in text:
        return None
    return text.split(NO_DETERMINISTIC_IMPLEMENTATION)[0].strip().split()[-1] or None
