"""A fresh default process group per test, on a rendezvous store kept for the session,
in a pool's rank and in a torchrun rank alike; or, where the suite's own code opened
the default group already (a torchrun suite's session fixture), that group, left open."""

from __future__ import annotations

import contextlib
import datetime
import functools
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
    keep_theirs: bool = False,
) -> Iterator[None]:
    """The default process group for one test: ``device`` made current, the group
    opened under ``prefix`` on ``store`` (so no two tests' keys meet), closed after.
    ``named``: the test asked for ``backend`` by name (else it is the device's default,
    and a group already open with another backend serves too). ``keep_theirs``: a
    default group the suite's own code opened during the test is left open after it
    (under torchrun, where the suite's session fixtures own it)."""
    dist = c10d()

    if device != "cpu":
        devices.set_current_device(device)
    if dist.is_initialized():
        _check_open_group(dist, backend if named else None, world_size)
        yield  # the suite's own group: it opened it, it closes it
        return
    limit = datetime.timedelta(seconds=timeout)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(prefix, store),
        rank=rank,
        world_size=world_size,
        timeout=limit,
    )
    _all_joined(dist.PrefixStore(f"{prefix}/joined", store), rank, world_size, limit)
    ours = dist.group.WORLD
    try:
        with _yielding_to_their_own(dist, ours):
            yield
    finally:
        if dist.is_initialized() and (dist.group.WORLD is ours or not keep_theirs):
            dist.destroy_process_group()


def _all_joined(store: Any, rank: int, world_size: int, timeout: datetime.timedelta) -> None:
    """Wait until every rank has its process group open. gloo lets a rank's
    ``init_process_group`` return while a peer still completes its connections, and a
    rank that ran a short test and closed its group then cut the peer off in set-up
    ("Connection closed by peer"). On the store, not a collective: the test's record of
    collectives starts empty."""
    store.set(str(rank), "1")
    store.wait([str(other) for other in range(world_size)], timeout)


@contextlib.contextmanager
def _yielding_to_their_own(dist: Any, ours: Any) -> Iterator[None]:
    """While the test runs, an ``init_process_group`` of the suite's own (a session
    fixture written for torchrun, a library's launcher) closes the group opened here
    first instead of failing with "trying to initialize the default process group
    twice"; torch's function is restored after."""
    import torch.distributed.distributed_c10d as c10d_module

    original = c10d_module.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if dist.is_initialized() and dist.group.WORLD is ours:
            dist.destroy_process_group()
        return original(*args, **kwargs)

    modules: tuple[Any, ...] = (dist, c10d_module)
    patched = [m for m in modules if m.init_process_group is original]
    for module in patched:
        module.init_process_group = init_process_group
    try:
        yield
    finally:
        for module in patched:
            if module.init_process_group is init_process_group:
                module.init_process_group = original


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
