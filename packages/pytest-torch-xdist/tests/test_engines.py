"""The thread plan, the GPU plan and the per-GPU lock, without pytest runs."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from pytest_torch.core import devices
from pytest_torch.xdist import gpus, threads
from pytest_torch.xdist.locks import GpuLock

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def test_thread_plans():
    env: dict[str, str] = {}
    assert threads.plan("auto", 4, 16, env) == threads.Plan(4, 16)
    assert threads.plan("auto", 3, 2, env).threads == 1  # never below one
    assert threads.plan("auto", 0, 16, env).threads is None  # no xdist: torch's default
    assert threads.plan(2, 0, 16, env).threads == 2
    assert threads.plan("none", 4, 16, env).describe() == (
        "torch's default threads (--torch-num-threads=none)"
    )
    user = threads.plan("auto", 4, 16, {"OMP_NUM_THREADS": "3"})
    assert user.threads is None and user.describe() == "threads left to OMP_NUM_THREADS=3"
    assert threads.plan(8, 4, 16, {"MKL_NUM_THREADS": "1"}).threads is None
    assert threads.Plan(4, 16).describe() == "4 of 16 threads"


def test_settings_and_oversubscription():
    assert threads.parse_setting(" AUTO ", "s") == "auto"
    assert threads.parse_setting("none", "s") == "none"
    assert threads.parse_setting("3", "s") == 3
    for bad in ("0", "-2", "many", "1.5"):
        with pytest.raises(
            threads.ThreadSettingError, match="s: expected auto, none or a positive"
        ):
            threads.parse_setting(bad, "s")
    assert threads.oversubscription("auto", 4, 2) is None
    assert threads.oversubscription(2, 2, 4) is None
    message = threads.oversubscription(4, 2, 4)
    assert (
        message is not None and "2 workers x 4 threads = 8 threads on 4 available cores" in message
    )
    assert "--torch-num-threads=8: 8 threads on 4 available cores;" in (
        threads.oversubscription(8, 0, 4) or ""
    )


def test_apply_sets_the_environment_and_torch_and_undo_restores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    # the inter-op pool size can be set once per process and never undone: on a worker
    # that is what we want; here it would outlive the test, so record the call instead
    interop: list[int] = []
    monkeypatch.setattr(torch, "set_num_interop_threads", interop.append)
    before = torch.get_num_threads()
    applied = threads.apply(1, interop=True)
    try:
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
        assert torch.get_num_threads() == 1  # torch was loaded: set at once
        assert interop == [1]
    finally:
        applied.undo()
    assert "OMP_NUM_THREADS" not in os.environ and os.environ["MKL_NUM_THREADS"] == "7"
    assert torch.get_num_threads() == before
    threads.apply(2).undo()  # outside a worker the inter-op pool is left alone
    assert interop == [1]


@pytest.fixture
def two_fake_gpus(monkeypatch):
    monkeypatch.setattr(devices, "is_available", lambda kind: kind in ("cpu", "cuda"))
    monkeypatch.setattr(devices, "device_count", lambda kind: 2 if kind == "cuda" else 1)


def test_gpu_plans(two_fake_gpus):
    plan = gpus.parse_gpus("auto", "--gpus")
    assert plan == gpus.GpuPlan("cuda", (0, 1))
    assert [plan.index_for(w) for w in range(5)] == [0, 1, 0, 1, 0]
    assert plan.sharing(0, 5) == 3 and plan.sharing(1, 5) == 2
    assert gpus.parse_gpus("1", "--gpus").indices == (1,)
    with pytest.raises(gpus.GpuSettingError, match="GPU 2 not usable: this process sees 2 cuda"):
        gpus.parse_gpus("0,2", "--gpus")
    with pytest.raises(gpus.GpuSettingError, match="each index may appear once"):
        gpus.parse_gpus("1,1", "--gpus")
    with pytest.raises(gpus.GpuSettingError, match="expected auto or comma-separated GPU"):
        gpus.parse_gpus("first", "--gpus")


def test_no_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(devices, "is_available", lambda kind: kind == "cpu")
    with pytest.raises(gpus.GpuSettingError, match="no CUDA or Intel XPU device"):
        gpus.parse_gpus("auto", "--torch-xdist-gpus (ini x)")


def test_memory_fractions():
    assert gpus.parse_fraction("auto", "f") == "auto"
    assert gpus.parse_fraction("0.5", "f") == 0.5
    assert gpus.parse_fraction("1", "f") == 1.0
    for bad in ("0", "1.5", "-0.1", "half"):
        with pytest.raises(gpus.GpuSettingError, match=r"f: expected auto or a fraction"):
            gpus.parse_fraction(bad, "f")
    # 16 GiB, 1 GiB reserved for contexts, split between two workers
    assert gpus.auto_fraction(16 * 2**30, 2) == pytest.approx(15 / 16 / 2)
    assert gpus.auto_fraction(None, 4) == 0.25


def test_lock_is_shared_between_readers_and_exclusive_for_writers(tmp_path):
    lock = GpuLock(tmp_path, "cuda", 0)
    events: list[str] = []

    def exclusive():
        with lock.exclusive():
            events.append("exclusive")

    with lock.shared(), GpuLock(tmp_path, "cuda", 0).shared():  # two readers at once
        writer = threading.Thread(target=exclusive)
        writer.start()
        time.sleep(0.2)
        events.append("readers done")
    writer.join(5)
    assert events == ["readers done", "exclusive"]
