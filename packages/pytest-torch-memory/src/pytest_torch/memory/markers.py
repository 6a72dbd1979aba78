"""The memory plugin's markers, declared once (help line and arguments); importing this
never imports the engines or torch."""

from __future__ import annotations

from pytest_torch.core.markers import MarkerSpec

BUDGET = MarkerSpec(
    "torch_max_memory",
    "fail the test if the peak memory allocated by torch during its body exceeds mb MiB"
    " on any measured device (cpu included), or only on the device types given.",
    positional=("mb",),
    defaults={"device": None},
    example="@pytest.mark.torch_max_memory(mb=512) or (torch_max_memory(512, device='cuda'))",
)
LEAK = MarkerSpec(
    "torch_memory_leak",
    "run the test body once to warm up and then iterations more times; fail if every run"
    " leaves more live tensors or bytes behind.",
    positional=("iterations",),
    defaults={"iterations": 5, "tolerance_tensors": 0, "tolerance_bytes": 0},
    example="@pytest.mark.torch_memory_leak(iterations=5, tolerance_bytes='64KiB')",
)
