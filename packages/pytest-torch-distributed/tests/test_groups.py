"""The per-test process group: no rank runs its test before every rank has its group
open (with gloo, a rank's init can return while a peer still connects; a rank that ran
a short test and closed its group cut that peer off)."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_torch.distributed import groups


def test_no_rank_starts_its_test_before_every_rank_has_joined(monkeypatch):
    dist = groups.c10d()
    joined_at: dict[int, float] = {}
    started_at: dict[int, float] = {}

    def slow_for_rank_1(backend, *, store, rank, world_size, timeout):
        time.sleep(0.5 if rank == 1 else 0.0)  # rank 1 still connecting
        joined_at[rank] = time.monotonic()

    monkeypatch.setattr(dist, "init_process_group", slow_for_rank_1)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    store = dist.HashStore()
    failures: list[BaseException] = []

    def rank(number: int) -> None:
        try:
            with groups.group_for_test(store, "t1", "gloo", number, 2, 10.0, "cpu"):
                started_at[number] = time.monotonic()
        except BaseException as error:  # reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=rank, args=(n,)) for n in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures
    assert started_at[0] >= joined_at[1], "rank 0 ran its test before rank 1 had joined"


def test_a_rank_that_never_joins_ends_the_wait_at_the_timeout(monkeypatch):
    dist = groups.c10d()
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    started = time.monotonic()
    opened = groups.group_for_test(dist.HashStore(), "t2", "gloo", 0, 2, 0.5, "cpu")
    with pytest.raises(Exception, match=r"(?i)timeout|timed out|wait"), opened:
        pass
    assert time.monotonic() - started < 10
