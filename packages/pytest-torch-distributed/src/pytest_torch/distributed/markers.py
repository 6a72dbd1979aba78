"""The distributed plugin's marker, declared once."""

from __future__ import annotations

from pytest_torch.core.markers import MarkerSpec

DISTRIBUTED = MarkerSpec(
    "torch_distributed",
    "run the test body on world_size torch.distributed ranks, each with an initialized"
    " default process group, the torchrun environment and a device of its own; backend:"
    " the device's default (gloo on cpu, nccl on cuda, xccl on xpu); timeout: seconds"
    " before a hang fails with every rank's stack (default --torch-distributed-timeout);"
    " device: a device type or a list in order of preference (default: the test's"
    " torch_device, else the accelerator when it has a device per rank, else cpu);"
    " share_devices: let ranks share accelerators.",
    positional=("world_size",),
    defaults={"backend": None, "timeout": None, "device": None, "share_devices": False},
    example="@pytest.mark.torch_distributed(world_size=2)",
)
