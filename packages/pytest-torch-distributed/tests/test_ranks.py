"""A test body on N ranks: the environment, fixtures in each rank, one result per test,
and a pool reused from test to test."""

from __future__ import annotations

import pytest

BODY = """
import os
import pytest
import torch
import torch.distributed as dist


@pytest.fixture
def shard(rank):
    return torch.arange(4.0) + 4 * rank


@pytest.mark.torch_distributed(world_size=2)
@pytest.mark.parametrize("scale", [1, 3])
def test_all_reduce(rank, world_size, scale, shard, tmp_path):
    assert dist.is_initialized() and dist.get_rank() == rank
    assert world_size == dist.get_world_size() == 2
    assert os.environ["RANK"] == os.environ["LOCAL_RANK"] == str(rank)
    assert os.environ["WORLD_SIZE"] == "2" and os.environ["MASTER_ADDR"]
    total = shard * scale
    dist.all_reduce(total)
    assert total.tolist() == [scale * v for v in [4.0, 6.0, 8.0, 10.0]]
    print(f"rank {rank} tmp {tmp_path}")


@pytest.mark.torch_distributed(2)
def test_all_gather(rank, shard):
    parts = [torch.empty(4) for _ in range(2)]
    dist.all_gather(parts, shard)
    assert torch.cat(parts).tolist() == list(map(float, range(8)))
"""


def test_body_runs_on_every_rank_with_its_fixtures(run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_body=BODY)
    result = run("-rA")
    result.assert_outcomes(passed=3)
    output = result.stdout.str()
    # each rank's own output, and a tmp_path of its own
    tmp0 = output.split("rank 0 tmp ")[1].split()[0]
    tmp1 = output.split("rank 1 tmp ")[1].split()[0]
    assert tmp0 != tmp1
    assert "Captured stdout call (rank 1)" in output
    result.stdout.fnmatch_lines(
        [
            "torch: 3 tests ran on torch.distributed ranks (2 ranks, gloo on cpu: 3);"
            " rank pools started 1 time(s)*"
        ]
    )


def test_fixtures_rank_and_world_size_outside_a_distributed_test(run, pytester) -> None:
    pytester.makepyfile(
        """
        def test_plain(rank):
            pass
        """
    )
    result = run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*the rank fixture is for tests that run on ranks: mark the test with*torch_distributed*"]
    )


def test_a_failure_names_its_rank_and_what_the_others_did(run, pytester) -> None:
    pytester.makepyfile(
        test_x="""
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.torch_distributed(world_size=2)
        def test_rank_one_disagrees(rank):
            value = torch.tensor([float(rank)])
            dist.broadcast(value, src=0)
            assert rank == 0, f"rank {rank} saw {value.item()}"
        """
    )
    result = run("-rA", "--junitxml=report.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rank 1 of 2 failed: AssertionError: rank 1 saw 0.0; rank 0 passed it",
            # the cause first, then what the others did
            "*- rank 1 -*",
            "E * AssertionError: rank 1 saw 0.0",
            "*- rank 0: passed -*",
            "rank 0 finished the test: passed",
            "FAILED test_x.py::test_rank_one_disagrees - rank 1 of 2 failed: Assertion*",
        ]
    )
    xml = (pytester.path / "report.xml").read_text()
    assert 'message="rank 1 of 2 failed: AssertionError: rank 1 saw 0.0' in xml


def test_a_pool_a_test_disturbed_is_replaced_and_ranks_start_where_pytest_did(
    run, pytester
) -> None:
    pytester.mkdir("tests")
    pytester.path.joinpath("tests", "test_state.py").write_text(
        """
import os
import pytest
import torch


def test_0_leaves_the_directory(tmp_path):
    os.chdir(tmp_path)  # never goes back: the ranks must still find the tests


@pytest.mark.torch_distributed(world_size=2)
def test_1_changes_dtype(rank):
    torch.set_default_dtype(torch.float64)


@pytest.mark.torch_distributed(world_size=2)
def test_2_sees_a_fresh_rank(rank, tmp_path):
    assert torch.get_default_dtype() == torch.float32
    os.chdir(tmp_path)


@pytest.mark.torch_distributed(world_size=2)
def test_3_starts_where_pytest_did(rank):
    assert torch.get_default_dtype() == torch.float32
    assert os.path.isdir("tests"), os.getcwd()
"""
    )
    result = run("-p", "no:randomly", "tests")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "torch: 3 tests ran on torch.distributed ranks*; rank pools started 3 time(s),*"
            " replaced after a test changed process state (2)",
            "torch:   tests/test_state.py::test_1_changes_dtype: the test left"
            " torch.get_default_dtype() at torch.float64 (was torch.float32);"
            " its ranks were replaced",
            "torch:   tests/test_state.py::test_2_sees_a_fresh_rank: the test left the current"
            " directory at *; its ranks were replaced",
        ]
    )
