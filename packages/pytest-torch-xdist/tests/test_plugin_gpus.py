"""The plugin in real runs: GPUs shared by two xdist workers, their memory fractions, and
the usage errors of its options.

xdist needs real processes, so these runs are subprocesses; GPUs are faked through the
core device layer (see FAKE_GPUS) and tested for real by the GPU tests."""

from __future__ import annotations

import json

import pytest

#: a conftest for inner runs that makes the device layer report two CUDA GPUs of 16 GiB
#: on this CPU machine and log what the plugin asks of them (one JSON line per call)
FAKE_GPUS = """
import json, os
import pytest
from pytest_torch.core import devices

LOG = os.environ["FAKE_GPU_LOG"]


def log(**entry):
    entry["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(LOG, "a") as out:
        out.write(json.dumps(entry) + "\\n")


NAMES = (
    "is_available", "device_count", "default_device", "total_memory", "set_current_device",
    "set_memory_fraction",
)
_saved = {name: getattr(devices, name) for name in NAMES}
_available, _count, _default = devices.is_available, devices.device_count, devices.default_device
devices.is_available = lambda kind: kind == "cuda" or _available(kind)
devices.device_count = lambda kind: 2 if kind == "cuda" else _count(kind)
devices.default_device = lambda kind: devices.as_device("cuda:0") if kind == "cuda" else _default(kind)
devices.total_memory = lambda device: 16 * 2**30
devices.set_current_device = lambda device: log(call="set_current_device", device=str(device))
devices.set_memory_fraction = lambda device, fraction: log(
    call="set_memory_fraction", device=str(device), fraction=fraction
)
# what this process's environment gave it before any conftest was imported
log(call="import", visible=os.environ.get("CUDA_VISIBLE_DEVICES"))


@pytest.hookimpl(trylast=True)  # after the plugin has lifted its memory cap
def pytest_unconfigure(config):  # in-process runs share the module: put it back
    for name, value in _saved.items():
        setattr(devices, name, value)
"""


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


GPU_SUITE = """
import json, os, time
import pytest


def record(name, torch_device):
    start = time.time()
    time.sleep(0.3)
    with open(os.environ["FAKE_GPU_LOG"], "a") as out:
        out.write(json.dumps({
            "test": name, "worker": os.environ["PYTEST_XDIST_WORKER"],
            "device": str(torch_device), "start": start, "end": time.time(),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }) + "\\n")


@pytest.mark.torch_devices("cuda")
@pytest.mark.parametrize("i", range(6))
def test_shared(i, torch_device):
    record(f"shared{i}", torch_device)


@pytest.mark.torch_gpu_exclusive
@pytest.mark.torch_devices("cuda")
@pytest.mark.parametrize("i", range(2))
def test_exclusive(i, torch_device):
    record(f"exclusive{i}", torch_device)


@pytest.mark.parametrize("i", range(2))
def test_without_the_fixture(i):  # might use "cuda" itself: the plugin cannot tell
    record(f"plain{i}", None)
"""


@pytest.fixture
def fake_gpus(pytester, monkeypatch):
    """Two fake 16 GiB CUDA GPUs in inner runs; the log of what the plugin asked."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    log = pytester.path / "gpus.jsonl"
    monkeypatch.setenv("FAKE_GPU_LOG", str(log))
    pytester.makeconftest(FAKE_GPUS)
    return log


@pytest.fixture
def gpu_suite(pytester, fake_gpus):
    pytester.makepyfile(test_gpus=GPU_SUITE)
    return fake_gpus


def test_workers_are_spread_over_gpus_with_identical_test_ids(gpu_suite, run_workers, pytester):
    result = run_workers("--torch-xdist-gpus=0,1", "--torch-gpu-memory-fraction=auto", "-v")
    result.assert_outcomes(passed=10)
    # one process per GPU of 16 GiB: 1 GiB kept for the GPU, 1 GiB for the process
    result.stdout.fnmatch_lines(
        [
            "  gw0: cuda:0 (CUDA_VISIBLE_DEVICES=0), 87.5% of its memory, *",
            "  gw1: cuda:1 (CUDA_VISIBLE_DEVICES=1), 87.5% of its memory, *",
        ]
    )
    result.stdout.fnmatch_lines(["*PASSED test_gpus.py::test_shared?cuda-0?*"])
    records = _lines(gpu_suite)
    visible = {"gw0": "0", "gw1": "1"}
    # the environment was narrowed before the worker imported the conftest
    imports = [r for r in records if r.get("call") == "import" and r["worker"] != "main"]
    assert sorted(imports, key=lambda r: r["worker"]) == [
        {"call": "import", "visible": "0", "worker": "gw0"},
        {"call": "import", "visible": "1", "worker": "gw1"},
    ]
    # each worker sees its GPU as cuda:0: nothing to switch to, no context made for it
    assert not [r for r in records if r.get("call") == "set_current_device"]
    for worker in ("gw0", "gw1"):  # the cap is lifted at exit
        fractions = [
            (r["device"], r["fraction"])
            for r in records
            if r.get("call") == "set_memory_fraction" and r["worker"] == worker
        ]
        assert fractions == [("cuda:0", pytest.approx(14 / 16)), ("cuda:0", 1.0)]
    tests = [r for r in records if "test" in r]
    assert {r["device"] for r in tests if r["device"] != "None"} == {"cuda:0"}
    assert all(r["visible"] == visible[r["worker"]] for r in tests)
    # the same ids without xdist
    plain = pytester.runpytest_subprocess(
        "-p", "torch_xdist", "-p", "no:xdist", "--collect-only", "-q"
    )
    with_workers = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_xdist", "-n", "2", "--collect-only", "-q"
    )
    ids = sorted(line for line in plain.outlines if "::" in line)
    assert ids and ids == sorted(line for line in with_workers.outlines if "::" in line)


def test_an_exclusive_test_never_overlaps_another_test_on_its_gpu(gpu_suite, run_workers):
    result = run_workers("--torch-xdist-gpus=0", "--torch-gpu-memory-fraction=0.4")
    result.assert_outcomes(passed=10)
    records = _lines(gpu_suite)
    fractions = [r["fraction"] for r in records if r.get("call") == "set_memory_fraction"]
    assert sorted(fractions) == [0.4, 0.4, 1.0, 1.0]
    tests = [r for r in records if "test" in r]
    assert {r["device"] for r in tests} == {"cuda:0", "None"}
    assert {r["visible"] for r in tests} == {"0"}
    assert len([r for r in tests if r["test"].startswith("plain")]) == 2
    # tests without torch_device hold the lock too (checked below with the others)
    shared = [r for r in tests if r["test"].startswith("shared")]
    for exclusive in (r for r in tests if r["test"].startswith("exclusive")):
        for other in tests:
            if other is exclusive:
                continue
            overlap = min(exclusive["end"], other["end"]) - max(exclusive["start"], other["start"])
            assert overlap <= 0, (exclusive, other)
    # ordinary GPU tests of the two workers did run side by side
    assert any(
        min(a["end"], b["end"]) > max(a["start"], b["start"])
        for a in shared
        for b in shared
        if a["worker"] != b["worker"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--torch-xdist-gpus=0,5"], "device 5 not usable: this process sees 2 cuda device(s)"),
        (["--torch-xdist-gpus=zero"], "expected auto or comma-separated GPU indices"),
        (
            ["--torch-gpu-memory-fraction=1.5"],
            "expected auto or a fraction of GPU memory in (0, 1]",
        ),
        (["--torch-gpu-memory-fraction=most"], "expected auto or a fraction of GPU memory"),
        (["--torch-num-threads=-1"], "expected auto, none or a positive number of threads"),
    ],
)
def test_bad_input_is_a_usage_error(gpu_suite, run, args, message):
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


@pytest.mark.parametrize(
    ("ini", "message"),
    [
        ("torch_num_threads = lots", "torch_num_threads (in tox.ini): expected auto, none or a"),
        ("torch_xdist_gpus = zero", "torch_xdist_gpus (in tox.ini): expected auto or comma-sep"),
        ("torch_gpu_memory_fraction = most", "torch_gpu_memory_fraction (in tox.ini): expected"),
    ],
)
def test_a_bad_ini_value_names_the_ini_file(gpu_suite, pytester, run, ini, message):
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])
    # the command line wins over the ini file, and is named instead
    result = run("--torch-num-threads=-1", "--torch-xdist-gpus=0", "--torch-gpu-memory-fraction=1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-num-threads: expected auto, none or a positive*"])


def test_gpus_requested_on_a_machine_without_gpus(pytester, run, monkeypatch):
    from pytest_torch.core import devices

    # a machine without GPUs, also when this suite runs on one
    monkeypatch.setattr(devices, "is_available", lambda kind: kind == "cpu")
    monkeypatch.setattr(devices, "device_count", lambda kind: 1 if kind == "cpu" else 0)
    result = run("--torch-xdist-gpus=auto")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--torch-xdist-gpus: torch sees no accelerator device here*"])
    # a fraction alone needs a GPU too, and the message names the option given
    result = run("--torch-gpu-memory-fraction=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--torch-gpu-memory-fraction: torch sees no accelerator device here*"
            " run without --torch-gpu-memory-fraction*"
        ]
    )


def test_exclusive_marker_is_a_no_op_without_gpus(pytester, run_workers):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.torch_gpu_exclusive
        @pytest.mark.parametrize("i", range(4))
        def test_cpu(i):
            pass
        """
    )
    run_workers().assert_outcomes(passed=4)


@pytest.mark.accelerator
def test_two_workers_share_one_real_accelerator(pytester, run_workers, monkeypatch, accelerator):
    log = pytester.path / "device.jsonl"
    monkeypatch.setenv("DEVICE_LOG", str(log))
    pytester.makepyfile(
        f"""
        import json, os, time
        import pytest
        import torch

        module = torch.get_device_module("{accelerator}")

        def record(name, device, **extra):
            start = time.time()
            x = torch.ones(256, 256, device=device)
            for _ in range(20):
                x = x @ x / 256
            module.synchronize(device)
            time.sleep(0.2)
            with open(os.environ["DEVICE_LOG"], "a") as out:
                out.write(json.dumps({{"test": name, "device": str(device),
                    "current": module.current_device(), "start": start,
                    "end": time.time(), **extra}}) + "\\n")

        @pytest.mark.torch_devices("{accelerator}")
        @pytest.mark.parametrize("i", range(4))
        def test_shared(i, torch_device):
            record(f"shared{{i}}", torch_device)

        @pytest.mark.torch_gpu_exclusive
        @pytest.mark.torch_devices("{accelerator}")
        def test_exclusive(torch_device):
            free, total = module.mem_get_info(torch_device)
            with pytest.raises(torch.OutOfMemoryError):  # over this worker's share
                torch.empty(int(total * 0.6), dtype=torch.uint8, device=torch_device)
            record("exclusive", torch_device)
        """
    )
    result = run_workers("--torch-xdist-gpus=0", "--torch-gpu-memory-fraction=auto")
    result.assert_outcomes(passed=5)
    records = _lines(log)
    assert {r["device"] for r in records} == {f"{accelerator}:0"}
    (exclusive,) = [r for r in records if r["test"] == "exclusive"]
    for other in records:
        if other is not exclusive:
            assert min(exclusive["end"], other["end"]) <= max(exclusive["start"], other["start"])


def test_an_outer_visible_list_is_mapped_entry_by_entry(gpu_suite, run_workers, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa-1111,MIG-bbbb-2222")
    result = run_workers("--torch-xdist-gpus=1,0")
    result.assert_outcomes(passed=10)
    result.stdout.fnmatch_lines(
        [
            "  gw0: cuda:1 (CUDA_VISIBLE_DEVICES=MIG-bbbb-2222), *",
            "  gw1: cuda:0 (CUDA_VISIBLE_DEVICES=GPU-aaaa-1111), *",
        ]
    )
    tests = [r for r in _lines(gpu_suite) if "test" in r]
    assert {r["worker"]: r["visible"] for r in tests} == {
        "gw0": "MIG-bbbb-2222",
        "gw1": "GPU-aaaa-1111",
    }


def test_a_fraction_alone_keeps_every_gpu_visible(gpu_suite, run_workers):
    result = run_workers("--torch-gpu-memory-fraction=auto")
    result.assert_outcomes(passed=10)
    # two processes on the current GPU of 16 GiB: (16 - 1 - 2) / 2 GiB each
    result.stdout.fnmatch_lines(["  gw0: cuda:0, 40.6% of its memory, *"])
    records = _lines(gpu_suite)
    assert {r["visible"] for r in records if "test" in r} == {None}
    fractions = sorted(r["fraction"] for r in records if r.get("call") == "set_memory_fraction")
    assert fractions == [pytest.approx(13 / 32)] * 2 + [1.0] * 2


RESTART_SUITE = """
import json, os, pathlib, time
import pytest


@pytest.mark.parametrize("i", range(12))
def test_work(i):
    time.sleep(0.3)
    worker = os.environ["PYTEST_XDIST_WORKER"]
    crashed = pathlib.Path(os.environ["FAKE_GPU_LOG"]).with_name("crashed")
    if worker == "gw1" and not crashed.exists():
        crashed.write_text("")
        os._exit(1)
"""


def test_a_restarted_worker_keeps_the_gpu_of_the_one_it_replaces(fake_gpus, pytester, run_workers):
    pytester.makepyfile(test_restart=RESTART_SUITE)
    result = run_workers("--torch-xdist-gpus=0,1", "--max-worker-restart=1")
    result.assert_outcomes(passed=11, failed=1)
    imports = {
        r["worker"]: r["visible"]
        for r in _lines(fake_gpus)
        if r.get("call") == "import" and r["worker"] != "main"
    }
    # gw2 replaces gw1 and is started from gw1's spec: GPU 1, not 2 mod 2 = 0
    assert imports == {"gw0": "0", "gw1": "1", "gw2": "1"}


def test_the_controller_gives_a_restarted_spec_the_same_assignment():
    from types import SimpleNamespace

    import execnet

    from pytest_torch.xdist import gpus
    from pytest_torch.xdist.plugin import _Controller
    from pytest_torch.xdist.settings import XdistSettings
    from pytest_torch.xdist.state import XdistSession
    from pytest_torch.xdist.workers import ASSIGNMENT_KEY

    settings = XdistSession(XdistSettings("auto", 2, None))
    settings.assignments = [
        gpus.Assignment("cuda", 0, "CUDA_VISIBLE_DEVICES", "3", 0.4),
        gpus.Assignment("cuda", 1, "CUDA_VISIBLE_DEVICES", "5", 0.4),
    ]
    controller = _Controller(settings)
    specs = [execnet.XSpec("popen"), execnet.XSpec("popen//env:OTHER=x")]
    for number, spec in enumerate(specs):
        spec.id = f"gw{number}"
    controller.pytest_xdist_setupnodes(config=None, specs=specs)  # type: ignore[arg-type]
    assert [spec.env for spec in specs] == [
        {"CUDA_VISIBLE_DEVICES": "3"},
        {"OTHER": "x", "CUDA_VISIBLE_DEVICES": "5"},
    ]
    specs[1].id = "gw2"  # what xdist does when it restarts a crashed gw1
    node = SimpleNamespace(gateway=SimpleNamespace(spec=specs[1]), workerinput={"workerid": "gw2"})
    controller.pytest_configure_node(node)
    assert node.workerinput[ASSIGNMENT_KEY]["gpu"] == 1
    assert specs[1].env["CUDA_VISIBLE_DEVICES"] == "5"


def test_a_share_too_small_for_auto_fails_at_start(fake_gpus, pytester, run):
    pytester.makepyfile("def test_one(): pass")
    # 14 processes on 16 GiB: 15 GiB reserved, 1/14 GiB each
    result = run(
        "-p", "xdist", "-n", "14", "--torch-xdist-gpus=0", "--torch-gpu-memory-fraction=auto"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--torch-gpu-memory-fraction=auto: cuda:0 has 16.0 GiB and 14 worker process(es)"
            " share it; after reserving 1.0 GiB for the GPU and 1.0 GiB per process*"
            "(15.0 GiB in all) that leaves 0.1 GiB each*Run fewer workers (-n)*"
        ]
    )


def test_a_tx_spec_that_sets_the_visible_gpus_itself_is_a_usage_error(fake_gpus, pytester, run):
    pytester.makepyfile("def test_one(): pass")
    result = run("-p", "xdist", "--tx", "popen//env:CUDA_VISIBLE_DEVICES=1", "--torch-xdist-gpus=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--tx popen//env:CUDA_VISIBLE_DEVICES=1: this worker spec sets CUDA_VISIBLE_DEVICES*"]
    )


def _fractions(log) -> list[tuple[str, float]]:
    return [
        (r["device"], r["fraction"]) for r in _lines(log) if r.get("call") == "set_memory_fraction"
    ]


def test_a_fraction_without_workers_caps_this_process_and_is_lifted(fake_gpus, pytester, run):
    pytester.makepyfile("def test_one(): pass")
    result = run("-p", "no:xdist", "--torch-gpu-memory-fraction=auto")
    result.assert_outcomes(passed=1)
    # alone on the current GPU: (16 - 1 - 1) / 16
    result.stdout.fnmatch_lines(
        ["torch GPU memory: cuda:0 capped at 87.5% of its memory (--torch-gpu-memory-fraction)"]
    )
    assert _fractions(fake_gpus) == [("cuda:0", pytest.approx(14 / 16)), ("cuda:0", 1.0)]
    fake_gpus.unlink()
    # the ini twin, and the first GPU of --torch-xdist-gpus
    pytester.makeini("[pytest]\ntorch_gpu_memory_fraction = 0.3\n")
    result = run("-p", "no:xdist", "--torch-xdist-gpus=1,0")
    result.assert_outcomes(passed=1)
    assert _fractions(fake_gpus) == [("cuda:1", 0.3), ("cuda:1", 1.0)]


def test_a_fraction_without_workers_is_lifted_when_a_test_fails(fake_gpus, pytester, run):
    pytester.makepyfile("def test_one(): assert False")
    run("-p", "no:xdist", "--torch-gpu-memory-fraction=0.5").assert_outcomes(failed=1)
    assert _fractions(fake_gpus) == [("cuda:0", 0.5), ("cuda:0", 1.0)]
