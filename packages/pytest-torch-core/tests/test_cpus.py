"""The cores this process may use, and thread counts that overrun them."""

from __future__ import annotations

from pytest_torch.core.cpus import available_cores, overrun


def test_available_cores_follow_the_affinity():
    import os

    assert available_cores() >= 1
    if hasattr(os, "sched_getaffinity"):
        assert available_cores() == len(os.sched_getaffinity(0))


def test_overrun_says_how_threads_exceed_the_cores():
    assert overrun(2, 1, 2) is None
    assert overrun(1, 4, 4) is None
    assert overrun(3, 1, 2) == "3 threads on 2 available cores"
    assert overrun(1, 3, 2) == "3 workers x 1 thread = 3 threads on 2 available cores"
    assert overrun(4, 2, 1) == "2 workers x 4 threads = 8 threads on 1 available core"
    assert overrun(2, 0, 1) == "2 threads on 1 available core"  # no xdist: one process
