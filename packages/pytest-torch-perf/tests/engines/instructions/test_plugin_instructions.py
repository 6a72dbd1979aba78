"""--torch-perf-measure=instructions in real runs: usage errors before any test runs
(in-process), and a few live sessions under Valgrind (in a subprocess: the plugin runs
the session again under Valgrind), skipped where Valgrind is not installed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_torch.perf.engines.instructions.valgrind import INSTALL_HINT

SUITE = """
import os
import time

import pytest
import torch

from pytest_torch.perf import benchmark_suite

CALLS = int(os.environ.get("CALLS", "10"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))
x = torch.randn(4, 32)


def steps():
    with torch.inference_mode():
        for _ in range(CALLS):
            model(x)


def test_steps(perf_baseline):
    perf_baseline(steps)


def test_steady(perf_baseline):
    perf_baseline(model, x)


@pytest.mark.torch_max_latency(ms=1000)
def test_budget(latency):
    latency(model, x)


@benchmark_suite(batch_sizes=(2,))
def test_cases(batch_size):
    return model, torch.randn(batch_size, 32)


def test_waits_to_be_stopped():
    if "STOP_MARKER" in os.environ:
        with open(os.environ["STOP_MARKER"], "w"):
            pass
        time.sleep(600)
"""

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or not sys.platform.startswith("linux"),
    reason=f"needs Valgrind on Linux ({INSTALL_HINT})",
)


@pytest.mark.parametrize(
    ("args", "ini", "named"),
    [
        (["--torch-perf-measure=cycles"], "", "--torch-perf-measure: expected one of wall,"),
        ([], "torch_perf_measure = instruction", "torch_perf_measure (in tox.ini): expected"),
        (
            ["--torch-perf-measure=instructions", "--torch-perf-instruction-tolerance=-0.01"],
            "",
            "--torch-perf-instruction-tolerance: expected a finite number >= 0, got '-0.01'",
        ),
        (
            ["--torch-perf-measure=instructions"],
            "torch_perf_instruction_tolerance = inf",
            "torch_perf_instruction_tolerance (in tox.ini): expected a finite number",
        ),
        (
            ["--torch-perf-measure=instructions", "--torch-perf-slack-instructions=1.5"],
            "",
            "--torch-perf-slack-instructions: expected a whole number >= 0, got '1.5'",
        ),
        (
            ["--torch-perf-measure=instructions", "--torch-device=cpu,cuda"],
            "",
            "*--torch-device=cpu,cuda: instruction counts see only the CPU's work*",
        ),
    ],
)
def test_bad_settings_are_usage_errors_before_any_test_runs(pytester, run, args, ini, named):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_never="def test_never():\n    raise AssertionError('ran')\n")
    result = run(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: *{named}*"])
    assert "ran" not in result.stdout.str()


@pytest.mark.usefixtures("torch_seed")  # the inner test draws a Linear's weights
def test_a_bad_instruction_tolerance_in_a_test_names_the_argument(pytester, run):
    pytester.makepyfile(
        test_tol="""
        import torch

        def test_tol(perf_baseline):
            perf_baseline(torch.nn.Linear(2, 2), torch.ones(1, 2), instruction_tolerance=-1)
        """
    )
    result = run("--torch-perf-max-time=0.01")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*perf_baseline: instruction_tolerance must be a finite number >= 0, got -1 (0.01 allows*"]
    )


def test_no_valgrind_is_a_usage_error_naming_the_package(pytester, run, monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("the not-Linux message comes first here")
    monkeypatch.setenv("PATH", str(pytester.path))
    pytester.makepyfile(test_never="def test_never():\n    raise AssertionError('ran')\n")
    result = run("--torch-perf-measure=instructions")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *Valgrind, which is not installed*apt-get install*"])


def test_a_missing_test_path_is_pytests_own_error_before_valgrind_starts(pytester, run):
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = run("--torch-perf-measure=instructions", "test_one.py", "tests/no_such_test.py::test")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: file or directory not found: tests/no_such_test.py::test"])
    assert "Valgrind" not in result.stdout.str() + result.stderr.str()


@needs_valgrind
def test_torch_compiles_isa_probe_runs_natively_and_other_children_are_followed(tmp_path):
    """torch.compile checks that its vector code loads in a child Python with a 60 s
    timeout: followed under Valgrind on a loaded machine it timed out, and the build
    that followed failed. The probe's own code is passed over; any other child is not."""
    from torch._inductor.cpu_vec_isa import VecISA

    from pytest_torch.perf.engines.instructions import valgrind

    probe = VecISA._avx_py_load.replace("__lib_path__", "libm.so.6")
    for child, followed in ((probe, False), ("print('other child')", True)):
        folder = tmp_path / ("followed" if followed else "probe")
        folder.mkdir()
        parent = (
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}], check=True)"
        )
        prefix = valgrind.command("valgrind", folder, [])[:-3]
        subprocess.run([*prefix, sys.executable, "-c", parent], check=True, timeout=240)
        outputs = list(folder.glob("callgrind.*"))
        assert len(outputs) == (2 if followed else 1), (child, outputs)


STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, __file__, "child"])
    print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts run on Linux only")
def test_a_session_that_ignores_sigterm_is_killed_with_its_children(tmp_path, monkeypatch):
    """The session under Valgrind (here a stand-in that ignores SIGTERM, as a test may,
    with a child that does too) ends within the grace time of a stopping signal."""
    from pytest_torch.perf.engines.instructions import valgrind

    monkeypatch.setattr(valgrind, "STOP_GRACE_S", 1.0)
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    process = subprocess.Popen([sys.executable, str(script), "parent"], stdout=subprocess.PIPE)
    child = int(process.stdout.readline())

    def stop(signum, frame):
        raise valgrind._Stopping

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # SIGALRM: then the stopping signal
        code = valgrind._wait(process)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        process.kill()
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    assert code == -signal.SIGKILL
    deadline = time.monotonic() + 10  # SIGKILL was sent: the child ends as soon as it runs
    while valgrind._alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not valgrind._alive(child)


def test_collect_only_needs_no_valgrind(pytester, run, monkeypatch):
    monkeypatch.setenv("PATH", str(pytester.path))
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    run("--torch-perf-measure=instructions", "--collect-only").assert_outcomes()


def _session(pytester, *args, calls=10):
    pytester.makepyfile(test_counts=SUITE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALLS", str(calls))
        return pytester.runpytest_subprocess(
            "-p", "torch_perf", "--torch-perf-measure=instructions", "--torch-benchmark", "-rs",
            "-p", "no:randomly", *args, timeout=240,
        )  # fmt: skip


@needs_valgrind
def test_live_record_then_compare_under_xdist(pytester):
    recorded = _session(pytester, "--torch-update-perf")
    recorded.assert_outcomes(passed=4, skipped=1)
    recorded.stdout.fnmatch_lines(
        [
            "torch perf: counting instructions under Valgrind *",
            "test_counts.py::test_steps * instructions * of 5 * instr * recorded*",
            "recorded 3 instruction count(s) for torch=* valgrind=* cpu=* in *",
            "SKIPPED [[]1[]] test_counts.py:*: *latency budget not judged: this run counts"
            " instructions under Valgrind*",
        ]
    )
    document = json.loads((pytester.path / ".torch-perf-baselines.json").read_text())
    assert "machines" in document and not document["machines"]
    ((key, tests),) = document["instructions"].items()
    assert set(tests) == {
        "test_counts.py::test_steps",
        "test_counts.py::test_steady",
        "test_counts.py::test_cases[cpu-float32-eager-b2]",
    }
    assert tests["test_counts.py::test_steady"]["functions"]

    # 11 calls instead of 10: exactly 1.1x the model's work, on an xdist worker (one: the
    # worker's path is the same for any number of them, and each more imports torch under
    # Valgrind, 20 s of CPU)
    compared = _session(pytester, "-p", "xdist", "-n", "1", "--junitxml=report.xml", calls=11)
    compared.assert_outcomes(passed=3, failed=1, skipped=1)
    compared.stdout.fnmatch_lines(
        [
            "*instruction count regression in test_counts.py::test_steps:",
            "*instructions per call: * instr vs baseline * instr = 1.*x (+*",
            "*grew most (own instructions per call: baseline -> now):",
            f"*counted under {key}, 1 intra-op thread*",
        ]
    )
    ratio = float(re.search(r"instr = ([\d.]+)x", compared.stdout.str()).group(1))
    # 11 calls against 10, less a count's fixed cost; the interpreter's part (about half
    # of this small model's count) moves a few % between a serial session and a worker
    assert 1.07 < ratio < 1.13
    xml = ET.parse(pytester.path / "report.xml")
    names = {prop.get("name"): prop.get("value") for prop in xml.iter("property")}
    assert float(names["torch_perf.test_counts.py::test_steady.instructions"]) > 0


@needs_valgrind
def test_a_session_stopped_before_it_records_leaves_nothing(pytester):
    """SIGTERM to pytest (``timeout``, a cancelled CI job) while the session under
    Valgrind, with an xdist worker, has counted three tests and waits in a fourth: every
    process of it (the session, its worker, what they started) ends within seconds,
    nothing is recorded, no folder is left. One worker: the stop signals the whole tree
    of processes, however many workers it holds, and a second, idle, worker would only
    import torch under Valgrind (20 s of CPU)."""
    pytester.makepyfile(test_counts=SUITE)
    baselines = pytester.path / ".torch-perf-baselines.json"
    baselines.write_text('{"format": 1, "machines": {}}\n')  # the user's: left as it is
    before = baselines.read_bytes()
    marker, temp = pytester.path / "stop-now", pytester.path / "tmp"
    temp.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CALLS", "12")
        patch.setenv("STOP_MARKER", str(marker))
        patch.setenv("TMPDIR", str(temp))
        process = pytester.popen(
            [sys.executable, "-m", "pytest", "-p", "torch_perf", "-p", "xdist", "-n", "1",
             "-p", "no:randomly", "--torch-perf-measure=instructions",
             "--torch-update-perf", "--torch-benchmark", "test_counts.py"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), process.communicate(timeout=60)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
        for pid, _ in _processes_in(pytester.path):  # a failed stop leaves none behind
            os.kill(pid, signal.SIGKILL)
    assert process.returncode == 128 + signal.SIGTERM
    assert "SIGTERM: the session under Valgrind was stopped; nothing was recorded" in err.decode()
    assert baselines.read_bytes() == before
    assert not list(temp.iterdir())
    assert not _processes_in(pytester.path)


def _processes_in(folder) -> list[tuple[int, bytes]]:
    """The processes working in ``folder``, but this one: pids and command lines."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            ours = not proc.name.isdigit() or int(proc.name) == os.getpid()
            if not ours and os.readlink(proc / "cwd") == str(folder):
                found.append((int(proc.name), (proc / "cmdline").read_bytes()))
        except OSError:
            continue
    return found
