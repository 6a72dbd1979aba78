from __future__ import annotations

import numpy  # noqa: F401
import pytest
import torch
import torch._dynamo

# torch and numpy are imported here, once: in-process pytester runs drop the modules a
# run imported, and these two cannot be imported twice in one process. The same holds
# for torch.compile's machinery, which benchmark suites load: load it here too.
torch._dynamo.list_backends()
torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.ones(1, 2))


@pytest.fixture
def run(pytester: pytest.Pytester):
    """Run pytest in-process on the pytester directory with the perf plugin enabled
    explicitly (it brings core), so tests behave the same with autoload on or off."""

    def _run(*args: str) -> pytest.RunResult:
        return pytester.runpytest("-p", "torch_perf", *args)

    return _run
