"""Per-test seeds and the random-number state they replace.

A test's seed is derived from a base seed and its node id, so every test gets its own
reproducible stream and adding a test never shifts another's numbers. Seeding covers
Python's ``random``, NumPy (when installed) and torch on the CPU and every available
accelerator; :func:`capture` and :func:`restore` put the previous state back.
"""

from __future__ import annotations

import functools
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from pytest_torch.core import devices

#: The seed torch's accelerator generators start from in a fresh process.
TORCH_DEFAULT_ACCELERATOR_SEED = 67280421310721


def derive_seed(base_seed: int, node_id: str) -> int:
    """The seed of one test: a stable 32-bit hash of the base seed and the test id."""
    import hashlib  # loading OpenSSL costs milliseconds at start-up; only seeded runs pay

    digest = hashlib.blake2b(f"{base_seed}\0{node_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


@dataclass
class RngSnapshot:
    """The random-number state of every generator that :func:`seed_all` touches."""

    python: Any
    numpy: Any | None
    torch_cpu: Any
    #: per accelerator type: its generators' states, or None if it was not initialised
    accelerators: dict[str, list[Any] | None] = field(default_factory=dict)


def _numpy() -> Any | None:
    if "numpy" in sys.modules:
        return sys.modules["numpy"]
    try:
        import numpy
    except ImportError:
        return None
    return numpy


@functools.cache  # which accelerators exist does not change within a process
def _accelerator_modules() -> list[tuple[str, Any]]:
    return [
        (kind, devices.backend_module(kind))
        for kind in devices.accelerator_types()
        if devices.is_available(kind)
    ]


def _initialised(module: Any) -> bool:
    check = getattr(module, "is_initialized", None)
    return bool(check()) if callable(check) else True


def capture() -> RngSnapshot:
    """Record the state of every generator that :func:`seed_all` changes."""
    import torch

    np = _numpy()
    snapshot = RngSnapshot(
        python=random.getstate(),
        numpy=np.random.get_state() if np is not None else None,
        torch_cpu=torch.get_rng_state(),
    )
    for kind, module in _accelerator_modules():
        if not _initialised(module):
            # Reading the state would create a device context; remember that it was
            # fresh instead, and make it fresh again on restore.
            snapshot.accelerators[kind] = None
        elif hasattr(module, "get_rng_state_all"):
            snapshot.accelerators[kind] = list(module.get_rng_state_all())
        else:
            snapshot.accelerators[kind] = [module.get_rng_state()]
    return snapshot


def seed_all(seed: int) -> None:
    """Seed Python, NumPy (if imported) and torch on every device with ``seed``."""
    import torch

    random.seed(seed)
    np = _numpy()
    if np is not None:
        np.random.seed(seed % 2**32)
    # Seeds the CPU and, lazily for uninitialised ones, every accelerator.
    torch.manual_seed(seed)


def restore(snapshot: RngSnapshot) -> None:
    """Put back the state recorded by :func:`capture`."""
    import torch

    random.setstate(snapshot.python)
    np = _numpy()
    if np is not None and snapshot.numpy is not None:
        np.random.set_state(snapshot.numpy)
    torch.set_rng_state(snapshot.torch_cpu)
    for kind, module in _accelerator_modules():
        states = snapshot.accelerators.get(kind)
        if states is None:
            # Uninitialised before: the next initialisation must see the default seed,
            # not the test's (the lazy seed call keeps only the latest request).
            seed_all_fn = getattr(module, "manual_seed_all", None) or module.manual_seed
            seed_all_fn(TORCH_DEFAULT_ACCELERATOR_SEED)
        elif hasattr(module, "set_rng_state_all"):
            module.set_rng_state_all(states)
        else:
            module.set_rng_state(states[0])


def drawn_since(snapshot: RngSnapshot) -> list[str]:
    """The generators that moved since ``snapshot`` was captured: something drew random
    numbers from them (an accelerator first used since then is not counted: it had no
    state to compare)."""
    import torch

    moved = []
    if random.getstate() != snapshot.python:
        moved.append("Python's random")
    np = _numpy()
    if np is not None and snapshot.numpy is not None:
        now = np.random.get_state()
        if any(
            not np.array_equal(a, b) if isinstance(a, np.ndarray) else a != b
            for a, b in zip(now, snapshot.numpy, strict=False)
        ):
            moved.append("NumPy's global generator")
    if not torch.equal(torch.get_rng_state(), snapshot.torch_cpu):
        moved.append("torch's CPU generator")
    for kind, module in _accelerator_modules():
        before = snapshot.accelerators.get(kind)
        if before is None or not _initialised(module):
            continue
        now_states = (
            list(module.get_rng_state_all())
            if hasattr(module, "get_rng_state_all")
            else [module.get_rng_state()]
        )
        if any(not torch.equal(a, b) for a, b in zip(now_states, before, strict=False)):
            moved.append(f"torch's {kind} generator")
    return moved
