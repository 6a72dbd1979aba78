from __future__ import annotations

import numpy  # noqa: F401
import pytest
import torch  # noqa: F401

# torch and numpy are imported here, once: in-process pytester runs drop the modules a
# run imported, and these two cannot be imported twice in one process.


@pytest.fixture
def run(pytester: pytest.Pytester):
    """Run pytest in-process with the xdist plugin enabled explicitly (it brings core)."""

    def _run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "torch_xdist", *args)

    return _run


@pytest.fixture
def run_workers(pytester: pytest.Pytester):
    """Run pytest in a subprocess with two xdist workers (xdist needs a real process)."""

    def _run(*args: str, workers: int = 2) -> pytest.RunResult:
        return pytester.runpytest_subprocess(
            "-p", "xdist", "-p", "torch_xdist", "-n", str(workers), *args
        )

    return _run
