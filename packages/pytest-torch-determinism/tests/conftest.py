from __future__ import annotations

import time

import pytest
import torch

# CPU kernels of torch are deterministic, so the kernel-level cases are two custom ops
# that behave like CUDA's atomics-based ones. Registered once per process, here, with
# their schema spelled out (torch 2.4 cannot read postponed annotations).
SCHEMA = "(Tensor values, Tensor index, int bins) -> Tensor"


@torch.library.custom_op("pytest_torch_tests::racy_sum", mutates_args=(), schema=SCHEMA)
def racy_sum(values: torch.Tensor, index: torch.Tensor, bins: int) -> torch.Tensor:
    """Sums values into bins in an arbitrary order (so float rounding varies), unless
    deterministic algorithms are on: then in index order."""
    order = torch.arange(values.numel())
    if not torch.are_deterministic_algorithms_enabled():
        order = torch.randperm(
            values.numel(), generator=torch.Generator().manual_seed(time.perf_counter_ns())
        )
    return torch.zeros(bins, dtype=values.dtype).index_add_(0, index[order], values[order])


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
