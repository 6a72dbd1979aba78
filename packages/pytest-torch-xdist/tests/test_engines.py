"""The thread plan, the GPU plan and the per-GPU lock, without pytest runs."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from pytest_torch.core import devices
from pytest_torch.xdist import gpus, options, threads, workers
from pytest_torch.xdist.locks import GpuLock
from pytest_torch.xdist.settings import XdistSettings
from pytest_torch.xdist.state import XdistSession

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
    assert options.parse_threads(" AUTO ", "s") == "auto"
    assert options.parse_threads("none", "s") == "none"
    assert options.parse_threads("3", "s") == 3
    for bad in ("0", "-2", "many", "1.5"):
        with pytest.raises(
            options.ThreadSettingError, match="s: expected auto, none or a positive"
        ):
            options.parse_threads(bad, "s")
    assert threads.oversubscription("auto", 4, 2) is None
    assert threads.oversubscription(2, 2, 4) is None
    message = threads.oversubscription(4, 2, 4)
    assert (
        message is not None and "2 workers x 4 threads = 8 threads on 4 available cores" in message
    )
    assert "--torch-num-threads=8: 8 threads on 4 available cores;" in (
        threads.oversubscription(8, 0, 4) or ""
    )


def test_thread_marker_counts():
    assert threads.pinned_count((2,), {}, "t") == 2
    assert threads.pinned_count((), {"n": 3}, "t") == 3
    wrong = {
        ((), ()): "needs a positive thread count, got none.",
        ((1, 2), ()): "takes n once.",
        ((1,), (("n", 1),)): "takes n once.",
        ((), (("count", 1),)): "got unknown keyword(s) count; it takes n=.",
    }
    for (args, kwargs), message in wrong.items():
        with pytest.raises(ValueError) as raised:
            threads.pinned_count(args, dict(kwargs), "t")
        assert str(raised.value).startswith(f"t: @pytest.mark.torch_threads {message}")
        assert str(raised.value).endswith("Example: @pytest.mark.torch_threads(1)")
    for bad in (0, True, 1.5, "2"):
        with pytest.raises(ValueError, match="torch_threads needs a positive thread count"):
            threads.pinned_count((bad,), {}, "t")


def test_pin_and_unpin_restore_torch_threads():
    before = torch.get_num_threads()
    assert threads.pin(1) == before
    try:
        assert torch.get_num_threads() == 1
    finally:
        threads.unpin(before)
    assert torch.get_num_threads() == before


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
    with pytest.raises(gpus.GpuSettingError, match="device 2 not usable: this process sees 2 cuda"):
        gpus.parse_gpus("0,2", "--gpus")
    with pytest.raises(gpus.GpuSettingError, match="each index may appear once"):
        gpus.parse_gpus("1,1", "--gpus")
    with pytest.raises(gpus.GpuSettingError, match="expected auto or comma-separated GPU"):
        gpus.parse_gpus("first", "--gpus")


def test_no_gpu_is_an_error(monkeypatch):
    monkeypatch.setattr(devices, "is_available", lambda kind: kind == "cpu")
    with pytest.raises(gpus.GpuSettingError, match="torch sees no accelerator device here"):
        gpus.parse_gpus("auto", "--torch-xdist-gpus (ini x)")


def test_memory_fractions():
    assert options.parse_fraction("auto", "f") == "auto"
    assert options.parse_fraction("0.5", "f") == 0.5
    assert options.parse_fraction("1", "f") == 1.0
    for bad in ("0", "1.5", "-0.1", "half"):
        with pytest.raises(ValueError, match=r"f: expected auto or a fraction"):
            options.parse_fraction(bad, "f")
    # 16 GiB: 1 GiB kept for the GPU and 1 GiB for each of the two worker processes
    assert gpus.auto_fraction(16 * 2**30, 2) == pytest.approx((16 - 1 - 2) / 2 / 16)
    assert gpus.auto_fraction(16 * 2**30, 1) == pytest.approx(14 / 16)
    # 141 GiB (an H200) shared by eight: the reserves grow with the processes
    assert gpus.auto_fraction(141 * 2**30, 8) == pytest.approx((141 - 1 - 8) / 8 / 141)
    assert gpus.auto_fraction(None, 4) == 0.25


def test_auto_fraction_refuses_a_share_too_small_to_use():
    # 8 GiB for six processes: 7 GiB reserved, 1/6 GiB each
    with pytest.raises(gpus.GpuSettingError) as info:
        gpus.auto_fraction(8 * 2**30, 6, "cuda:1")
    message = str(info.value)
    for part in (
        "--torch-gpu-memory-fraction=auto: cuda:1 has 8.0 GiB and 6 worker process(es)",
        "(7.0 GiB in all) that leaves 0.2 GiB each",
        "at least 1.0 GiB per worker",
        "fewer workers (-n)",
        "more GPUs (--torch-xdist-gpus)",
        "(--torch-gpu-memory-fraction=0.16, no reserve)",
    ):
        assert part in message, message
    with pytest.raises(gpus.GpuSettingError, match="leaves nothing"):
        gpus.auto_fraction(4 * 2**30, 4)
    # the smallest share that still passes: exactly the minimum
    total = (1 + 2 * (1 + 1)) * 2**30
    assert gpus.auto_fraction(total, 2) == pytest.approx(1 / 5)


def test_visible_value_maps_a_worker_through_the_outer_list():
    assert gpus.visible_value("cuda", 1, None) == "1"
    assert gpus.visible_value("cuda", 0, "") == "0"
    assert gpus.visible_value("cuda", 1, "3,5") == "5"
    assert gpus.visible_value("cuda", 0, " 2 , 7") == "2"
    uuids = "GPU-8f3b1c2d-0000-1111-2222-333344445555,GPU-aaaa"
    assert gpus.visible_value("cuda", 0, uuids) == "GPU-8f3b1c2d-0000-1111-2222-333344445555"
    mig = "MIG-GPU-8f3b1c2d/1/0,MIG-4b8e2c6a-1111-2222-3333-444455556666"
    assert gpus.visible_value("cuda", 1, mig) == "MIG-4b8e2c6a-1111-2222-3333-444455556666"
    assert gpus.visible_value("cuda", 0, mig) == "MIG-GPU-8f3b1c2d/1/0"
    assert gpus.visible_value("xpu", 1, "0.0,0.1") == "0.1"
    with pytest.raises(
        gpus.GpuSettingError, match=r"cuda:2 has no entry in CUDA_VISIBLE_DEVICES='3,5' \(2 entries"
    ):
        gpus.visible_value("cuda", 2, "3,5")


def test_an_assignment_travels_as_a_dict_and_describes_itself():
    narrowed = gpus.Assignment("cuda", 1, "CUDA_VISIBLE_DEVICES", "GPU-aaaa", 0.40625)
    assert gpus.Assignment.from_dict(dict(narrowed._asdict())) == narrowed
    assert narrowed.describe() == "cuda:1 (CUDA_VISIBLE_DEVICES=GPU-aaaa), 40.6% of its memory"
    assert gpus.Assignment("cuda", 0, None, None, None).describe() == "cuda:0"


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


def test_worker_counts_and_numbers():
    assert options.count_workers(3, []) == 3
    assert options.count_workers(None, ["2*popen", "popen//env:X=1"]) == 3
    assert options.count_workers(0, []) == 0
    assert options.worker_number("gw12") == 12
    assert options.worker_number("mine") == 0


def test_the_controller_plans_each_worker(two_fake_gpus, monkeypatch):
    monkeypatch.setattr(devices, "total_memory", lambda device: 16 * 2**30)
    settings = XdistSession(XdistSettings("auto", 3, None))
    settings.gpus, settings.narrow, settings.fraction = gpus.GpuPlan("cuda", (1, 0)), True, "auto"
    planned = workers.plan_assignments(settings, [], "--gpus", {"CUDA_VISIBLE_DEVICES": "4,6"})
    # GPU 1 is shared by workers 0 and 2: (16 - 1 - 2) / 2 GiB each; GPU 0 by worker 1 alone
    assert planned == [
        gpus.Assignment("cuda", 1, "CUDA_VISIBLE_DEVICES", "6", pytest.approx(13 / 32)),
        gpus.Assignment("cuda", 0, "CUDA_VISIBLE_DEVICES", "4", pytest.approx(14 / 16)),
        gpus.Assignment("cuda", 1, "CUDA_VISIBLE_DEVICES", "6", pytest.approx(13 / 32)),
    ]
    with pytest.raises(gpus.GpuSettingError, match="--tx popen//env:CUDA_VISIBLE_DEVICES=0: this"):
        workers.plan_assignments(settings, ["popen//env:CUDA_VISIBLE_DEVICES=0"], "--gpus", {})
    settings.assignments = planned
    settings.narrow = False  # a fraction alone: no visibility variable, every GPU visible
    assert {a.variable for a in workers.plan_assignments(settings, [], "--gpus", {})} == {None}
    lines = workers.header_lines(settings, 8, {})
    assert lines is not None and lines[0] == "torch xdist: 3 workers, 8 cores available"
    assert lines[1] == "  gw0: cuda:1 (CUDA_VISIBLE_DEVICES=6), 40.6% of its memory, 2 of 8 threads"


def test_a_restarted_spec_keeps_its_assignment():
    first, second = (
        gpus.Assignment("cuda", 0, None, None, None),
        gpus.Assignment("cuda", 1, None, None, None),
    )
    book = workers.SpecAssignments([first, second])
    spec = type("Spec", (), {"id": "gw1"})()
    assert book.for_spec(spec, 0) == second
    spec.id = "gw2"  # restarted from the same spec object
    assert book.for_spec(spec, 2) == second
    assert book.for_spec(object(), 4) == first  # no gw id: by position
    assert workers.SpecAssignments([]).for_spec(spec, 0) is None
