"""Which rank this process is, for the fixtures and checks that run inside a rank."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    #: the rank's device: "cpu" or e.g. "cuda:1"
    device: str


#: set in a rank's pytest session (a pool's rank, or a process started by torchrun)
rank_key = pytest.StashKey[RankInfo]()

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun(environ: dict[str, str] | None = None) -> bool:
    """Whether this process was started by torchrun (or a launcher that sets its
    environment contract) as one rank of a world."""
    env = os.environ if environ is None else environ
    return all(env.get(name) for name in TORCHRUN_VARIABLES)


def run_without_terminal(pluginmanager: pytest.PytestPluginManager) -> None:
    """Run this session without pytest's terminal (as with ``-p no:terminal``): another
    process reports for it. Called before ``pytest_configure``, so it prints nothing."""
    pluginmanager.set_blocked("terminal")
