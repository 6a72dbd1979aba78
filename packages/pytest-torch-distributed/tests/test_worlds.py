"""Under pytest-xdist each worker keeps its own pool; under torchrun the ranks are the
world pytest was started in: results gathered to rank 0, one exit status everywhere."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

TESTS = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.torch_distributed(world_size=2)
@pytest.mark.parametrize("n", range(3))
def test_sum(rank, n):
    t = torch.tensor([float(rank + n)])
    dist.all_reduce(t)
    assert t.item() == 1 + 2 * n
"""


def test_each_xdist_worker_runs_its_own_pool(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TESTS, test_b=TESTS.replace("test_sum", "test_total"))
    result = pytester.runpytest_subprocess(
        "-p", "xdist", "-p", "torch_distributed", "-n", "2", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ["torch: 6 tests ran on torch.distributed ranks (2 ranks, gloo on cpu: 6)*"]
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


TORCHRUN_TESTS = """
import os
import pytest
import torch
import torch.distributed as dist

@pytest.mark.torch_distributed(world_size=2)
def test_world(rank, world_size):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == world_size == 2 and str(rank) == os.environ["RANK"]

@pytest.mark.torch_distributed(world_size=2)
def test_rank_one_fails(rank):
    dist.barrier()
    assert rank == 0, "rank 1 disagrees"

@pytest.mark.torch_distributed(world_size=4)
def test_needs_four():
    pass

def test_plain():
    # an unmarked test runs on every rank, as it would without the plugin
    assert os.environ["RANK"] in ("0", "1") and not dist.is_initialized()
"""


def test_two_torchrun_nodes_report_once_and_exit_alike(pytester: pytest.Pytester) -> None:
    """``torchrun --nnodes=2 --nproc-per-node=1`` started twice: two "nodes" on one
    machine, as a multi-node job would start pytest."""
    pytester.makepyfile(test_t=TORCHRUN_TESTS)
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--max-restarts=0",
        "-m",
        "pytest",
        "-p",
        "torch_distributed",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "-rA",
        "test_t.py",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    nodes = [
        subprocess.Popen(
            command,
            cwd=pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [node.communicate(timeout=240)[0] for node in nodes]
    codes = [node.returncode for node in nodes]
    # which node got rank 0 is the rendezvous' choice: rank 0's output has the marked
    # tests' report; every rank reports the unmarked tests it ran itself
    reporting = [out for out in outputs if "FAILED test_t.py::test_rank_one_fails" in out]
    assert len(reporting) == 1, outputs
    report = reporting[0]
    other = outputs[1 - outputs.index(report)]
    for line in (
        "PASSED test_t.py::test_world",
        "PASSED test_t.py::test_plain",
        "SKIPPED [[]1] test_t.py:*: needs world_size=4; this torchrun world has 2 ranks",
        "FAILED test_t.py::test_rank_one_fails - rank 1 of 2*AssertionError: rank 1 disagrees*",
        "*1 failed, 2 passed, 1 skipped*",
    ):
        assert _matches(report, line), (line, report)
    for line in (
        "PASSED test_t.py::test_plain",
        "torch: 2 torch_distributed test(s) ran here as rank 1 of 2; rank 0 reports them",
    ):
        assert _matches(other, line), (line, other)
    assert "test_rank_one_fails" not in other and "test_world" not in other
    # the other rank's exit status is rank 0's: a CI job fails on any node alike
    assert codes[0] == codes[1] != 0, (codes, outputs)


def _matches(text: str, pattern: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(line, pattern) for line in text.splitlines())


def test_the_torchrun_contract_is_read_from_the_environment() -> None:
    from pytest_torch.distributed.world import launched_by_torchrun

    contract = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "1",
    }
    assert launched_by_torchrun(contract)
    assert not launched_by_torchrun({**contract, "RANK": ""})
    assert not launched_by_torchrun({})


def test_a_torchrun_world_on_port_0_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_torch.distributed.torchrun import world_from_environment

    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "0"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(pytest.UsageError, match=r"MASTER_PORT=0 .*--standalone"):
        world_from_environment()
