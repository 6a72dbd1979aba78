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


@pytest.fixture
def one_thread(pytester: pytest.Pytester) -> None:
    """Run the inner suite's tests on one intra-op thread, restored afterwards.

    With one thread, a busy neighbour on the machine costs a timing at most its share of
    a core; with a thread per core, torch's workers wait on each other and a 40 µs
    forward can take milliseconds. Comparisons in these tests must not hinge on that.
    """
    pytester.makeconftest(
        """
        import pytest, torch

        @pytest.fixture(autouse=True)
        def _one_thread():
            before = torch.get_num_threads()
            torch.set_num_threads(1)
            yield
            torch.set_num_threads(before)
        """
    )
