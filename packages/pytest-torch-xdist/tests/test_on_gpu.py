"""The GPU paths on a real CUDA GPU: narrowing, memory fractions, the per-GPU lock.

Each test runs a small suite under pytest-xdist in a subprocess (or a plain run) and
reads what the inner tests wrote to a JSON-lines log. One GPU is enough: the workers
are spread over GPU 0 only, so several GPUs are simulated where that means something
(the CPU tests in test_plugin.py and test_engines.py cover the mapping).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from pytest_torch.xdist.gpus import visible_value

pytestmark = pytest.mark.cuda(reason="CUDA_VISIBLE_DEVICES narrowing, GPU UUIDs and CUDA contexts")

GIB = 2**30


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _uuid(index: int = 0) -> str:
    """GPU ``index``'s UUID as this process sees it."""
    return str(torch.cuda.get_device_properties(index).uuid)


def _first_gpu() -> str:
    """What a worker given this process's cuda:0 gets as CUDA_VISIBLE_DEVICES: "0", or
    the first entry of a CUDA_VISIBLE_DEVICES this suite was started with."""
    return visible_value("cuda", 0, os.environ.get("CUDA_VISIBLE_DEVICES"))


@pytest.fixture
def log(pytester, monkeypatch):
    path = pytester.path / "cuda.jsonl"
    monkeypatch.setenv("CUDA_LOG", str(path))
    # inner runs load only the plugins they name: no other plugin can touch the GPU
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return path


#: helpers for inner suites: ``write(**entry)`` appends a JSON line to the log
WRITE = """
import json, os, time
import torch


def write(**entry):
    entry["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    entry["visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    with open(os.environ["CUDA_LOG"], "a") as out:
        out.write(json.dumps(entry) + "\\n")


def context():
    torch.cuda.device_count()  # sets up the runtime; makes no context
    check = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    return None if check is None else bool(check(0))


def fraction():
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    return None if get is None else get(0)
"""


def test_each_worker_sees_only_its_gpu_even_at_import_time(pytester, log, run_workers):
    pytester.makepyfile(helpers=WRITE)
    pytester.makeconftest(
        """
        import torch
        from helpers import write

        # import-time CUDA use, before any plugin hook of the worker ran
        ON_IMPORT = torch.ones(1, device="cuda")
        write(at="import", count=torch.cuda.device_count(), device=str(ON_IMPORT.device),
              uuid=str(torch.cuda.get_device_properties(ON_IMPORT.device).uuid))
        """
    )
    pytester.makepyfile(
        """
        import pytest
        import torch
        from helpers import write

        @pytest.mark.torch_devices("cuda")
        @pytest.mark.parametrize("i", range(4))
        def test_device(i, torch_device):
            explicit = torch.ones(1, device="cuda:0")
            write(at="test", count=torch.cuda.device_count(), fixture=str(torch_device),
                  current=torch.cuda.current_device(), explicit=str(explicit.device),
                  uuid=str(torch.cuda.get_device_properties(explicit.device).uuid))
        """
    )
    result = run_workers("--torch-xdist-gpus=0")
    result.assert_outcomes(passed=4)
    visible = _first_gpu()
    result.stdout.fnmatch_lines(
        [
            f"  gw0: cuda:0 (CUDA_VISIBLE_DEVICES={visible}), *",
            f"  gw1: cuda:0 (CUDA_VISIBLE_DEVICES={visible}), *",
        ]
    )
    records = _lines(log)
    imports = [r for r in records if r["at"] == "import" and r["worker"] != "main"]
    assert sorted(r["worker"] for r in imports) == ["gw0", "gw1"]
    assert all(
        r["visible"] == visible and r["count"] == 1 and r["device"] == "cuda:0" for r in imports
    ), imports
    tests = [r for r in records if r["at"] == "test"]
    assert len(tests) == 4
    assert all(
        (r["visible"], r["count"], r["fixture"], r["current"], r["explicit"])
        == (visible, 1, "cuda:0", 0, "cuda:0")
        for r in tests
    ), tests
    assert {r["uuid"] for r in imports + tests} == {_uuid(0)}  # the GPU given: this one


def test_a_worker_makes_no_cuda_context_unless_a_fraction_is_asked_for(pytester, log, run_workers):
    if getattr(torch._C, "_cuda_hasPrimaryContext", None) is None:
        pytest.skip("this torch cannot tell whether a CUDA context exists")
    pytester.makepyfile(helpers=WRITE)
    pytester.makeconftest(
        """
        import pytest
        from helpers import context, write

        @pytest.hookimpl(trylast=True)
        def pytest_sessionstart(session):  # every plugin of the process is configured
            write(at="start", context=context())
        """
    )
    pytester.makepyfile("def test_cpu(): pass")
    run_workers("--torch-xdist-gpus=0").assert_outcomes(passed=1)
    starts = {r["worker"]: r["context"] for r in _lines(log)}
    assert starts == {"main": False, "gw0": False, "gw1": False}, starts


def test_a_child_process_of_a_test_inherits_the_narrowing(pytester, log, run_workers):
    pytester.makepyfile(
        """
        import json, os, subprocess, sys

        CHILD = (
            "import json, os, torch;"
            "print(json.dumps([torch.cuda.device_count(),"
            " os.environ.get('CUDA_VISIBLE_DEVICES'),"
            " str(torch.cuda.get_device_properties(0).uuid)]))"
        )

        def test_child():
            out = subprocess.run([sys.executable, "-c", CHILD], check=True,
                                 capture_output=True, text=True).stdout
            with open(os.environ["CUDA_LOG"], "a") as log:
                log.write(json.dumps({"worker": os.environ["PYTEST_XDIST_WORKER"],
                                      "child": json.loads(out.splitlines()[-1])}) + "\\n")
        """
    )
    run_workers("--torch-xdist-gpus=0").assert_outcomes(passed=1)
    (record,) = _lines(log)
    assert record["child"] == [1, _first_gpu(), _uuid(0)]


def test_auto_fraction_in_two_workers_on_one_gpu_leaves_the_reserves(pytester, log, run_workers):
    pytester.makepyfile(helpers=WRITE)
    pytester.makepyfile(
        """
        import pytest
        import torch
        from helpers import fraction, write

        @pytest.mark.parametrize("i", range(4))
        def test_fraction(i):
            total = torch.cuda.get_device_properties(0).total_memory
            write(total=total, fraction=fraction())
            # the cap holds whether or not torch can report it
            share = (total - 3 * 2**30) // 2
            with pytest.raises(torch.cuda.OutOfMemoryError):
                torch.empty(share + 2**30, dtype=torch.uint8, device="cuda")
            torch.empty(share // 2, dtype=torch.uint8, device="cuda")
            torch.cuda.empty_cache()
        """
    )
    run_workers("--torch-xdist-gpus=0", "--torch-gpu-memory-fraction=auto").assert_outcomes(
        passed=4
    )
    records = _lines(log)
    total = torch.cuda.get_device_properties(0).total_memory
    # 1 GiB for the GPU, 1 GiB for each of the two worker processes
    expected = (total - 3 * GIB) / 2 / total
    per_worker = {r["worker"]: r["fraction"] for r in records}
    assert set(per_worker) == {"gw0", "gw1"}
    if None not in per_worker.values():
        assert all(f == pytest.approx(expected, rel=1e-3) for f in per_worker.values())
        assert sum(per_worker.values()) <= 1 - 3 * GIB / total + 1e-3


def test_a_fraction_without_workers_is_applied_and_lifted(pytester, log):
    pytester.makepyfile(helpers=WRITE)
    pytester.makeconftest(
        """
        import pytest
        from helpers import fraction, write

        @pytest.hookimpl(trylast=True)  # after the plugin lifted the cap
        def pytest_unconfigure(config):
            write(at="end", fraction=fraction())
        """
    )
    pytester.makepyfile(
        """
        import pytest
        import torch
        from helpers import fraction, write

        def test_capped():
            write(at="test", fraction=fraction())
            total = torch.cuda.get_device_properties(0).total_memory
            with pytest.raises(torch.cuda.OutOfMemoryError):
                torch.empty(int(total * 0.3) + 2**30, dtype=torch.uint8, device="cuda")
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "torch_xdist", "-p", "no:xdist", "--torch-gpu-memory-fraction=0.25"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["torch GPU memory: cuda:0 capped at 25.0% of its memory*"])
    fractions = {r["at"]: r["fraction"] for r in _lines(log)}
    if fractions["test"] is not None:
        assert fractions == {"test": pytest.approx(0.25, abs=1e-3), "end": pytest.approx(1.0)}


def test_a_cuda_test_without_the_fixture_never_overlaps_an_exclusive_test(
    pytester, log, run_workers
):
    pytester.makepyfile(helpers=WRITE)
    pytester.makepyfile(
        """
        import time
        import pytest
        import torch
        from helpers import write

        def busy(name):
            start = time.time()
            x = torch.ones(512, 512, device="cuda")  # no torch_device: invisible to the plugin
            for _ in range(20):
                x = x @ x / 512
            torch.cuda.synchronize()
            time.sleep(0.2)
            write(test=name, start=start, end=time.time())

        @pytest.mark.parametrize("i", range(8))
        def test_plain(i):
            busy(f"plain{i}")

        @pytest.mark.torch_gpu_exclusive
        @pytest.mark.parametrize("i", range(2))
        def test_exclusive(i):
            busy(f"exclusive{i}")
        """
    )
    run_workers("--torch-xdist-gpus=0").assert_outcomes(passed=10)
    records = _lines(log)
    assert len(records) == 10
    for exclusive in (r for r in records if r["test"].startswith("exclusive")):
        for other in records:
            if other is not exclusive:
                overlap = min(exclusive["end"], other["end"]) - max(
                    exclusive["start"], other["start"]
                )
                assert overlap <= 0, (exclusive, other)


def _visible_works(value: str) -> bool:
    """Whether CUDA on this machine accepts ``CUDA_VISIBLE_DEVICES=value`` as one GPU."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": value},
        capture_output=True,
        text=True,
    )
    return probe.returncode == 0 and probe.stdout.strip().endswith("1")


@pytest.mark.parametrize("form", ["index", "uuid"])
def test_an_outer_cuda_visible_devices_is_honoured(pytester, log, run_workers, monkeypatch, form):
    # read before the variable narrows this process: CUDA set up under it would see one GPU
    # for the rest of the session
    expected_uuid = _uuid(0)
    outer = _first_gpu() if form == "index" else f"GPU-{expected_uuid}"
    if form == "uuid" and not _visible_works(outer):
        pytest.skip(f"CUDA here does not accept CUDA_VISIBLE_DEVICES={outer} (MIG?)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", outer)
    pytester.makepyfile(helpers=WRITE)
    pytester.makepyfile(
        """
        import pytest
        import torch
        from helpers import write

        @pytest.mark.parametrize("i", range(2))
        def test_visible(i):
            write(count=torch.cuda.device_count(),
                  uuid=str(torch.cuda.get_device_properties(0).uuid))
        """
    )
    result = run_workers("--torch-xdist-gpus=auto")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"  gw0: cuda:0 (CUDA_VISIBLE_DEVICES={outer}), *"])
    records = _lines(log)
    assert {(r["visible"], r["count"], r["uuid"]) for r in records} == {(outer, 1, expected_uuid)}
