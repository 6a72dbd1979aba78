"""A fresh default process group per test, on a rendezvous store kept for the session,
in a pool's rank and in a torchrun rank alike; or, where the suite's own code opened
the default group already (a torchrun suite's session fixture), that group, left open."""

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
    named: bool = True,
) -> Iterator[None]:
    """The default process group for one test: ``device`` made current, the group
    opened under ``prefix`` on ``store`` (so no two tests' keys meet), closed after.
    ``named``: the test asked for ``backend`` by name (else it is the device's default,
    and a group already open with another backend serves too)."""
    dist = c10d()

    if device != "cpu":
        devices.set_current_device(device)
    if dist.is_initialized():
        _check_open_group(dist, backend if named else None, world_size)
        yield  # the suite's own group: it opened it, it closes it
        return
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


def _check_open_group(dist: Any, backend: str | None, world_size: int) -> None:
    """A default group the suite's code left open serves the test when it spans the
    test's ranks with the backend the test asked for; else a RuntimeError saying why."""
    theirs = str(dist.get_backend())
    size = dist.get_world_size()
    wanted = {part.split(":")[-1] for part in backend.split(",")} if backend else set()
    if size != world_size or (wanted and not wanted <= set(theirs.replace(":", ",").split(","))):
        raise RuntimeError(
            f"the default process group that the suite's own code opened ({theirs} on"
            f" {size} ranks) is still open, and this test asks for"
            f" {backend or 'the default backend'} on {world_size} ranks: close it first"
            " (torch.distributed.destroy_process_group()), or let the test use it"
        )
