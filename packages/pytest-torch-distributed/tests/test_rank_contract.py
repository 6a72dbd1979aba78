"""What a test's ranks get and give back: torchrun's contract (``TORCHELASTIC_RUN_ID``
included), a folder and a store they share, ``init_process_group`` of their own, their
warnings shown once with their ranks, their JUnit properties, a skip on some ranks
reported as a skip, and environment changes a library makes on purpose undone instead
of replacing the pool."""

from __future__ import annotations

import pytest

CONTRACT = """
import os
import warnings

import pytest
import torch
import torch.distributed as dist


@pytest.mark.torch_distributed(world_size=2)
def test_1_torchrun_contract(rank, world_size):
    assert dist.is_torchelastic_launched()
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        assert name in os.environ, name
    assert int(os.environ["RANK"]) == rank and int(os.environ["WORLD_SIZE"]) == world_size


@pytest.mark.torch_distributed(world_size=2)
def test_2_shared_folder_and_store(rank, shared_tmp_path, shared_store):
    seen = [None, None]
    dist.all_gather_object(seen, str(shared_tmp_path))
    assert seen[0] == seen[1]
    if rank == 0:
        torch.save({"w": torch.arange(3)}, shared_tmp_path / "ckpt.pt")
        shared_store.set("saved", "yes")
    shared_store.wait(["saved"])
    assert torch.load(shared_tmp_path / "ckpt.pt")["w"].tolist() == [0, 1, 2]
    assert shared_store.get("saved") == b"yes"


@pytest.mark.torch_distributed(world_size=2)
@pytest.mark.parametrize("n", [0, 1])
def test_3_own_init_process_group(rank, n):
    # as Lightning Fabric, accelerate or composer do: leave the group, open one on env://
    dist.destroy_process_group()
    dist.init_process_group("gloo")
    t = torch.tensor([float(rank + n)])
    dist.all_reduce(t)
    assert t.item() == 1 + 2 * n


@pytest.mark.torch_distributed(world_size=2)
def test_4_warns(rank, record_property):
    warnings.warn("learning rate is high", UserWarning)
    if rank == 1:
        warnings.warn("only rank 1 saw this", DeprecationWarning)
    record_property("loss", 0.5 + rank)
    record_property("steps", 3)


@pytest.mark.torch_distributed(world_size=2)
def test_5_skips_on_one_rank(rank):
    if rank == 1:
        pytest.skip("no second shard")


@pytest.mark.torch_distributed(world_size=2)
def test_6_seeds_like_lightning(rank):
    os.environ["PL_GLOBAL_SEED"] = "42"


@pytest.mark.torch_distributed(world_size=2)
def test_7_after_the_seed(rank):
    assert "PL_GLOBAL_SEED" not in os.environ
"""


def test_what_ranks_share_and_report(run, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=CONTRACT)
    result = run("-rA", "-W", "always", "--junitxml=out.xml")
    result.assert_outcomes(passed=7, skipped=1, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*learning rate is high (ranks 0, 1 of 2)",
            "*DeprecationWarning: only rank 1 saw this (rank 1 of 2)",
            # PL_GLOBAL_SEED is undone in the ranks: one pool served every test
            "*rank pools started 1 time(s)*",
            # a skip on some ranks is a skip: the test did not run whole
            "SKIPPED [[]1] test_k.py:*: no second shard (skipped on rank 1 of 2; rank 0 ran"
            " it and passed: the test did not run whole)",
        ]
    )
    xml = (pytester.path / "out.xml").read_text()
    assert '<property name="loss" value="0.5"' in xml
    assert '<property name="loss (rank 1)" value="1.5"' in xml
    assert xml.count('name="steps"') == 1  # the same on every rank: once


def test_a_change_outside_the_restored_variables_replaces_the_pool(run, pytester) -> None:
    pytester.makepyfile(
        test_e="""
        import os
        import pytest

        @pytest.mark.torch_distributed(world_size=2)
        def test_1_sets(rank):
            os.environ["MYLIB_CACHE"] = "x"

        @pytest.mark.torch_distributed(world_size=2)
        def test_2_fresh(rank):
            assert "MYLIB_CACHE" not in os.environ
        """
    )
    result = run("-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*rank pools started 2 time(s)*"])
    # named (here by pattern in the ini twin), the change is undone in place
    pytester.makeini("[pytest]\ntorch_distributed_restore_env = PL_GLOBAL_SEED, MYLIB_*\n")
    result = run("-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*rank pools started 1 time(s)*"])


def test_a_bad_restore_env_value_is_a_usage_error(run, pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run("--torch-distributed-restore-env=MYLIB-*")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*expected environment variable names or patterns such as PL_GLOBAL_SEED*'MYLIB-*'*"]
    )
