from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _not_inside_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """When this suite itself runs under xdist, each test's inner pytest run must not
    take itself for one of the outer run's workers (the variables xdist sets) nor inherit
    the thread count the outer run gave its workers."""
    for name in (
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def run_workers(pytester: pytest.Pytester):
    """Run pytest in a subprocess with two xdist workers (xdist needs a real process)."""

    def _run(*args: str, workers: int = 2) -> pytest.RunResult:
        return pytester.runpytest_subprocess(
            "-p", "xdist", "-p", "torch_xdist", "-n", str(workers), *args
        )

    return _run
