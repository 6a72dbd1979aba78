"""The xdist plugin's markers, declared once (help line and arguments); importing this
never imports the engines or torch."""

from __future__ import annotations

from pytest_torch.core.markers import MarkerSpec

EXCLUSIVE = MarkerSpec(
    "torch_gpu_exclusive",
    "run this test with its GPU to itself: no other test of any xdist worker runs on that"
    " GPU meanwhile (no-op without xdist or GPUs).",
)
#: the marker that pins one test's torch thread count
THREADS = MarkerSpec(
    "torch_threads",
    "run this test with n torch intra-op threads, restored after.",
    positional=("n",),
    example="@pytest.mark.torch_threads(1)",
)
