from __future__ import annotations

import numpy  # noqa: F401
import pytest
import torch  # noqa: F401

# torch and numpy are imported here, once: in-process pytester runs drop the modules a
# run imported, and these two cannot be imported twice in one process.


@pytest.fixture
def run(pytester: pytest.Pytester):
    """Run pytest in-process on the pytester directory with the perf plugin enabled
    explicitly (it brings core), so tests behave the same with autoload on or off."""

    def _run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "torch_perf", *args)

    return _run
