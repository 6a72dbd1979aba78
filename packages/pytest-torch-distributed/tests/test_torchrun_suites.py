"""Suites that already run pytest under torchrun are left as they were: the plugin joins
torchrun's world only for the tests marked ``torch_distributed``; every unmarked test
runs on every rank, with the process group the suite opened itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

#: a suite written for ``torchrun --nproc-per-node=2 -m pytest``, without the plugin
OWN_GROUP = """
import pytest
import torch.distributed as dist


@pytest.fixture(scope="session", autouse=True)
def process_group():
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()
"""

UNMARKED = """
import torch
import torch.distributed as dist


def test_sum():
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size() == 2


def test_rank_is_torchruns():
    import os
    assert dist.get_rank() == int(os.environ["RANK"])
"""


#: a marked test in a file that sorts before the suite's own tests
MARKED = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.torch_distributed(world_size=2)
def test_marked(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""


def _torchrun(pytester: pytest.Pytester, *args: str) -> list[str]:
    """``torchrun --standalone --nproc-per-node=2 -m pytest ARGS``: each rank's output
    (torchrun's ``--tee`` prefixes it with ``[default0]:``), by rank; the exit
    status; everything it printed."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--tee=3",
        "--max-restarts=0",
        "-m",
        "pytest",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "-rA",
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    done = subprocess.run(
        command, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=240
    )
    text = done.stdout + done.stderr
    ranks: list[list[str]] = [[], []]
    for line in text.splitlines():
        prefix = re.match(r"\[(?:default)?([01])\]:", line)  # --tee names each rank's lines
        if prefix:
            ranks[int(prefix.group(1))].append(line[prefix.end() :])
    return ["\n".join(ranks[0]), "\n".join(ranks[1]), str(done.returncode), text]


def test_an_unmarked_suite_runs_on_every_rank_as_without_the_plugin(pytester) -> None:
    pytester.makeconftest(OWN_GROUP)
    pytester.makepyfile(test_u=UNMARKED)
    # as without the plugin: every rank runs the whole suite, and nothing of ours shows
    rank0, rank1, code, text = _torchrun(pytester, "-p", "torch_distributed")
    assert code == "0", text
    for out in (rank0, rank1):
        assert "2 passed" in out, text
        assert "torch_distributed test(s) ran here" not in out, text
    # a marked test that runs first, before the suite's session fixture opened its
    # group: the fixture's init_process_group takes over from the plugin's group
    pytester.makepyfile(test_a_marked=MARKED)
    rank0, rank1, code, text = _torchrun(pytester, "-p", "torch_distributed")
    assert code == "0", text
    assert "3 passed" in rank0 and "2 passed" in rank1, text


MARKED_AFTER_OWN = """
import pytest
import torch
import torch.distributed as dist
import warnings


def test_1_opens_its_own_group():
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


@pytest.mark.torch_distributed(world_size=2)
def test_2_marked_uses_the_open_group(rank):
    warnings.warn("from every rank", UserWarning)
    t = torch.ones(1) * rank
    dist.all_reduce(t)
    assert t.item() == 1


@pytest.mark.torch_distributed(world_size=2)
def test_3_shares_a_folder_and_a_store(rank, shared_tmp_path, shared_store):
    if rank == 0:
        (shared_tmp_path / "from-rank-0").write_text("hi")
        shared_store.set("written", "1")
    shared_store.wait(["written"])
    assert (shared_tmp_path / "from-rank-0").read_text() == "hi"
"""


def test_a_marked_test_after_a_group_the_suite_opened_reuses_it(pytester) -> None:
    pytester.makepyfile(test_m=MARKED_AFTER_OWN)
    rank0, rank1, code, text = _torchrun(pytester, "-p", "torch_distributed")
    assert code == "0", text
    assert "INTERNALERROR" not in text
    assert "3 passed, 1 warning" in rank0, text
    assert "from every rank (ranks 0, 1 of 2)" in rank0, text
    # rank 1 reports the unmarked test it ran; rank 0 reports the marked one for both
    assert "PASSED test_m.py::test_1_opens_its_own_group" in rank1, text
    assert "2 torch_distributed test(s) ran here as rank 1 of 2; rank 0 reports them" in rank1


#: a launcher like composer's (``composer -n 2 -m pytest``): processes with torchrun's
#: variables but no elastic agent, so rank 0 hosts the rendezvous on MASTER_PORT itself
LAUNCHER = """
import os, socket, subprocess, sys
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
procs = []
for rank in range(2):
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
           "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    procs.append(subprocess.Popen([sys.executable, "-m", "pytest", *sys.argv[1:]], env=env,
                                  stdout=open(f"rank{rank}.out", "w"), stderr=subprocess.STDOUT))
sys.exit(max(proc.wait(timeout=200) for proc in procs))
"""


def test_a_launcher_without_an_agent_keeps_the_suites_own_group(pytester) -> None:
    pytester.makeconftest(OWN_GROUP)
    pytester.makepyfile(test_u=UNMARKED)
    pytester.makepyfile(test_a_marked=MARKED)
    (pytester.path / "launch.py").write_text(LAUNCHER)
    args = ["-p", "torch_distributed", "-p", "no:randomly", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "launch.py", *args], cwd=pytester.path, timeout=240, check=False
    )
    rank0, rank1 = ((pytester.path / f"rank{r}.out").read_text() for r in (0, 1))
    assert done.returncode == 0, (rank0, rank1)
    assert "3 passed" in rank0 and "2 passed" in rank1, (rank0, rank1)
