"""The session's ``CUBLAS_WORKSPACE_CONFIG`` under ``--torch-deterministic``: set when the
session starts (before the initial conftests can touch CUDA) unless it is exported,
warned about when it is exported with a value deterministic mode refuses or set after
CUDA was initialised, and removed when the session ends (see :mod:`.cublas` for why
it has to be in place before the first CUDA matrix product).

What was done is recorded in :class:`~pytest_torch.determinism.state.DeterminismSession`
(the header's line, and whether to remove it). Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pytest_torch.determinism import cublas
from pytest_torch.determinism.options import DETERMINISTIC
from pytest_torch.determinism.state import DeterminismSession


def set_up(state: DeterminismSession, warn: Callable[[str], None]) -> None:
    """Put the variable in place for the session, unless there is no cuBLAS to set up (a
    CPU-only build of torch) or it is exported; ``warn`` tells a configuration warning."""
    if not cublas.cuda_build():  # no cuBLAS to set up: a CPU-only build of torch
        return
    exported = os.environ.get(cublas.VARIABLE)
    if exported is not None:
        _exported(state, exported, warn)
        return
    late = cublas.cuda_initialised()
    os.environ[cublas.VARIABLE] = cublas.VALUE
    state.cublas_set = True
    state.cublas_line = f"{cublas.EXPORT} (set for this session)"
    if late:
        state.cublas_line += ", after CUDA was initialised (see the warning)"
        warn(
            f"{DETERMINISTIC} set {cublas.EXPORT}, but CUDA was already initialised (by"
            f" a plugin or conftest imported before), so a CUDA matrix product may have run"
            f" without it: torch and cuBLAS read the variable only at the first one, and if one"
            f" did, every CUDA matrix product under deterministic mode raises. Export it before"
            f" starting pytest: {cublas.EXPORT} pytest ...",
        )


def _exported(state: DeterminismSession, exported: str, warn: Callable[[str], None]) -> None:
    """The user exported the variable: kept, and warned about when torch refuses it."""
    if cublas.is_deterministic(exported):
        state.cublas_line = f"{cublas.VARIABLE}={exported} (exported)"
        return
    state.cublas_line = (
        f"{cublas.describe(exported)} is exported, which is not deterministic:"
        f" export {cublas.EXPORT} instead (see the warning)"
    )
    warn(
        f"{DETERMINISTIC}: {cublas.describe(exported)} is exported, but torch accepts"
        f" only {' or '.join(cublas.DETERMINISTIC_VALUES)} under deterministic algorithms:"
        f" every CUDA matrix product in a test using torch_seed will raise. Export"
        f" {cublas.EXPORT} instead (or :16:8: less memory, maybe slower), or unset it and"
        f" the plugin sets {cublas.VALUE} for the session.",
    )


def restore(state: DeterminismSession) -> None:
    """Remove the variable the session set."""
    # only our own value: a test or conftest that changed it since owns it now
    if state.cublas_set and os.environ.get(cublas.VARIABLE) == cublas.VALUE:
        del os.environ[cublas.VARIABLE]
    state.cublas_set = False
