from __future__ import annotations

import pytest
import torch

# CPU kernels of torch are deterministic, so the kernel-level cases are two custom ops
# that behave like CUDA's atomics-based ones. Registered once per process, here, with
# their schema spelled out (torch 2.4 cannot read postponed annotations).
SCHEMA = "(Tensor values, Tensor index, int bins) -> Tensor"


#: the last non-deterministic call's inputs and result, so that the next call on the same
#: inputs is sure to differ (random orders alone can round alike, and fail a test by chance)
_last: list[torch.Tensor] = []
_orders = torch.Generator().manual_seed(0)


@torch.library.custom_op("pytest_torch_tests::racy_sum", mutates_args=(), schema=SCHEMA)
def racy_sum(values: torch.Tensor, index: torch.Tensor, bins: int) -> torch.Tensor:
    """Sums values into bins in an arbitrary order (so float rounding varies: two calls
    in a row on the same inputs never agree), unless deterministic algorithms are on: then
    in index order."""
    if torch.are_deterministic_algorithms_enabled():
        return torch.zeros(bins, dtype=values.dtype).index_add_(0, index, values)
    repeated = len(_last) == 3 and all(
        a.shape == b.shape and torch.equal(a, b)
        for a, b in zip(_last[:2], (values, index), strict=True)
    )
    for _ in range(1000):
        order = torch.randperm(values.numel(), generator=_orders)
        result = torch.zeros(bins, dtype=values.dtype).index_add_(0, index[order], values[order])
        if not (repeated and torch.equal(result, _last[2])):
            break
    _last[:] = [values.clone(), index.clone(), result.clone()]
    return result


@torch.library.custom_op("pytest_torch_tests::fast_scatter", mutates_args=(), schema=SCHEMA)
def fast_scatter(values: torch.Tensor, index: torch.Tensor, bins: int) -> torch.Tensor:
    """Like racy_sum, but with no deterministic implementation: refuses deterministic
    mode the way torch's own ops do."""
    if torch.are_deterministic_algorithms_enabled():
        raise RuntimeError(
            "fast_scatter_cpu does not have a deterministic implementation, but you set"
            " 'torch.use_deterministic_algorithms(True)'."
        )
    return racy_sum(values, index, bins)


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA device, initialised once for the session (so that a test's own figures
    never include setting CUDA up)."""
    torch.cuda.init()
    return torch.device("cuda")
