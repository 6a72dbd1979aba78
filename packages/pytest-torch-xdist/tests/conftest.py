from __future__ import annotations

import pytest


@pytest.fixture
def run_workers(pytester: pytest.Pytester):
    """Run pytest in a subprocess with two xdist workers (xdist needs a real process)."""

    def _run(*args: str, workers: int = 2) -> pytest.RunResult:
        return pytester.runpytest_subprocess(
            "-p", "xdist", "-p", "torch_xdist", "-n", str(workers), *args
        )

    return _run
