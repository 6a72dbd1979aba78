"""torch_distributed tests with the family's other checks: each acts inside every rank,
and what reaches the report names the rank."""

from __future__ import annotations

import pytest

SUITE = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.torch_distributed(world_size=2)
@pytest.mark.torch_max_memory(mb=24)
def test_rank_one_allocates_more(rank):
    block = torch.ones((1 + 40 * rank) * 2**18)  # rank 1: 41 MiB
    dist.barrier()


@pytest.mark.torch_distributed(world_size=2)
def test_deterministic_in_every_rank(rank, torch_seed):
    assert torch.are_deterministic_algorithms_enabled()
    dist.barrier()


@pytest.mark.torch_distributed(world_size=2)
def test_mismatch_on_rank_one(rank):
    from pytest_torch.core.compare import assert_close

    dist.barrier()
    assert_close(torch.ones(3) + (rank == 1), torch.ones(3))
"""


def test_memory_leak_determinism_and_ci_checks_act_in_each_rank(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("COLUMNS", "250")
    pytester.makepyfile(test_f=SUITE)
    names = ("torch_distributed", "torch_memory", "torch_determinism", "torch_ci")
    plugins = [arg for name in names for arg in ("-p", name)]
    checks = ["--torch-leak-check", "--torch-deterministic", "--torch-github-annotations"]
    result = pytester.runpytest(*plugins, *checks, "--junitxml=report.xml", "-rA")
    result.assert_outcomes(passed=1, failed=2)
    # the memory budget fails where it is exceeded, naming the rank; the peak reported is
    # the largest rank's, and the property says whose
    result.stdout.fnmatch_lines(
        [
            "torch: --torch-leak-check checked all 3 test bodies that ran",
            "torch: --torch-deterministic applied to 1 of 3 tests (those using torch_seed)",
            "FAILED test_f.py::test_rank_one_allocates_more - rank 1 of 2 failed: Failed: peak memory*",
        ]
    )
    xml = (pytester.path / "report.xml").read_text()
    assert '<property name="torch_distributed.peak_rank" value="1"' in xml
    # the mismatch's annotation points into the test's body (a failing line a rank
    # reported), not at its def line
    source = (pytester.path / "test_f.py").read_text().splitlines()
    start = 1 + next(i for i, code in enumerate(source) if "def test_mismatch_on_rank_one" in code)
    (mismatch,) = [x for x in result.outlines if x.startswith("::error ") and "mismatch" in x]
    line = int(mismatch.split("line=")[1].split(",")[0])
    assert mismatch.startswith("::error file=test_f.py,") and start < line <= len(source)
    # the job summary is the run's, written once (the ranks write none)
    assert summary.read_text().count("## pytest-torch: 2 failed, 1 passed") == 1
