"""``CUBLAS_WORKSPACE_CONFIG``: what deterministic cuBLAS needs, and when it is read.

Under deterministic algorithms torch refuses every CUDA matrix product unless the
variable is ``:4096:8`` or ``:16:8``. torch reads it only once per process, at the first
CUDA matrix product (a function-local static in ATen's
``Context::alertCuBLASConfigNotDeterministic``), and so does cuBLAS's workspace size
(``getChosenWorkspaceSize``): setting it after that changes nothing for the process.
So the variable has to be in place before the first CUDA matrix product. Where it was
not, torch refuses every later matrix product under deterministic algorithms, which the
diagnosis reports as such (with the fix) rather than as a verdict.

Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from pytest_torch.core import devices
from pytest_torch.determinism.options import DETERMINISTIC

VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
#: what the plugin and the diagnosis set (``:16:8`` uses less memory, and may be slower)
VALUE = ":4096:8"
DETERMINISTIC_VALUES = (":4096:8", ":16:8")
EXPORT = f"{VARIABLE}={VALUE}"


def is_deterministic(value: str | None) -> bool:
    return value in DETERMINISTIC_VALUES


def describe(value: str | None) -> str:
    return f"{VARIABLE} unset" if value is None else f"{VARIABLE}={value!r}"


def cuda_build() -> bool:
    """Whether the installed torch is built for CUDA (or ROCm, which reads the same
    variable): only then can a cuBLAS matrix product run. Read from ``torch/version.py``
    without importing torch; True where that cannot be read."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "version"):
        return bool(getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None))
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return False  # no torch: nothing to set it up for
        folder = next(iter(spec.submodule_search_locations))
        with open(os.path.join(folder, "version.py"), encoding="utf-8") as file:
            tree = ast.parse(file.read())
    except (OSError, SyntaxError, ValueError, ImportError):
        return True
    built = {}
    for node in tree.body:
        target: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            built[target.id] = value.value
    if "cuda" not in built and "hip" not in built:
        return True
    return bool(built.get("cuda") or built.get("hip"))


def cuda_initialised() -> bool:
    """Whether this process has set up CUDA (then a matrix product may have run).

    Never imports torch and never initialises CUDA: without torch imported, CUDA
    cannot have been initialised.
    """
    if "torch" not in sys.modules:
        return False
    try:
        return devices.is_initialized("cuda")
    except Exception:  # a broken CUDA install: nothing can have run on it
        return False


def refused(error: BaseException) -> bool:
    """Whether ``error`` is torch refusing a cuBLAS matrix product under deterministic
    algorithms because of ``CUBLAS_WORKSPACE_CONFIG``."""
    text = str(error)
    return VARIABLE in text and "CuBLAS" in text


def refusal_explained() -> str:
    """Why torch refused, and the fix, for reports."""
    allowed = " or ".join(DETERMINISTIC_VALUES)
    return (
        f"torch refused a CUDA matrix product under deterministic algorithms because"
        f" {VARIABLE} was not {allowed} when this process ran its first CUDA matrix"
        f" product (torch and cuBLAS read it only then). Export {EXPORT} before starting"
        f" Python (for pytest: {EXPORT} pytest ..., or use {DETERMINISTIC}, which sets"
        f" it at start-up)"
    )


@contextlib.contextmanager
def deterministic_workspace() -> Iterator[None]:
    """Run the block with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless it already holds a
    deterministic value; put the previous value back afterwards, also on error.

    If a CUDA matrix product already ran in this process with another value, this comes
    too late and torch refuses the block's matrix products under deterministic
    algorithms (:func:`refused` recognises that): nothing is silently wrong.
    """
    before = os.environ.get(VARIABLE)
    if is_deterministic(before):
        yield
        return
    os.environ[VARIABLE] = VALUE
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = before
