"""Which rank this process is, for the fixtures and checks that run inside a rank."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class SharedContext:
    """What every rank of the running test shares."""

    #: a ``torch.distributed`` store with this test's keys only
    store: Any
    #: one folder for every rank of the test (None: none could be made)
    shared_dir: Path | None


#: set in a rank's session while it runs a test
shared_key = pytest.StashKey[SharedContext]()


def new_shared_dir(item: pytest.Item) -> Path | None:
    """A fresh folder under pytest's base temp for the ranks of ``item`` to share, if
    it asks for ``shared_tmp_path`` (None otherwise)."""
    if "shared_tmp_path" not in getattr(item, "fixturenames", ()):
        return None
    factory = item.config._tmp_path_factory  # type: ignore[attr-defined]
    name = re.sub(r"[\W]", "_", item.name)[:30]
    return Path(factory.mktemp(f"shared-{name}", numbered=True))


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
