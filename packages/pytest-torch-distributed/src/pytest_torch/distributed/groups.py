"""A fresh default process group per test, on a rendezvous store kept for the session,
in a pool's rank and in a torchrun rank alike."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any

from pytest_torch.core import devices


def c10d() -> Any:
    """``torch.distributed``, untyped: its stores and ``rendezvous`` are not exported for
    type checkers."""
    import torch.distributed as dist

    return dist


@contextlib.contextmanager
def group_for_test(
    store: Any,
    prefix: str,
    backend: str,
    rank: int,
    world_size: int,
    timeout: float,
    device: str,
) -> Iterator[None]:
    """The default process group for one test: ``device`` made current, the group
    opened under ``prefix`` on ``store`` (so no two tests' keys meet), closed after."""
    dist = c10d()

    if device != "cpu":
        devices.set_current_device(device)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(prefix, store),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
