"""Realistic PyTorch code patterns, each labelled with whether it makes the host wait for a GPU.

A pattern *synchronises* when its tensors live on a CUDA device and, with
``torch.cuda.set_sync_debug_mode("error")`` armed, running it (after one warm-up call)
raises: the CUDA backend performed a blocking stream synchronisation or a blocking
``memcpy_and_sync`` (a device-to-host read such as ``.item()``, ``bool(t)``, ``print(t)``
or ``nonzero``, or a blocking host-to-device copy such as ``torch.tensor(data,
device="cuda")``). Every label is that CUDA behaviour, and its ``reason`` names the PyTorch
source or documentation it was read from; patterns whose CUDA behaviour could not be
established from the sources are left out. ``build(device)`` sets a pattern up on
``device`` and returns the zero-argument code that is judged, so the catalogue runs on the
CPU (against a detector) and on a CUDA GPU (to confirm the labels).

The patterns live in one module per group of areas; ``PATTERNS`` lists them all, in the
catalogue's order (the order of the table in docs/performance.md).
"""

from __future__ import annotations

from . import host, masking, models, sampling, training
from .common import Pattern

PATTERNS: tuple[Pattern, ...] = (
    *training.PATTERNS,
    *models.PATTERNS,
    *sampling.PATTERNS,
    *masking.PATTERNS,
    *host.PATTERNS,
)
