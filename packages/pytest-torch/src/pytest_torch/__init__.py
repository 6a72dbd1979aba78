__path__ = __import__("pkgutil").extend_path(__path__, __name__)
# The line above makes pytest_torch a namespace shared with the plugin packages.
#
# pytest-torch: every plugin of the family, and their public names in one place.
#
# `from pytest_torch import assert_close` works; each name is imported from its plugin
# package on first use (PEP 562), so importing `pytest_torch` is free and never imports
# torch. To add a name, add it to `_EXPORTS` (name -> module) and to `__all__`.

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_torch.core.compare import (
        Mismatch,
        TensorMismatchError,
        assert_close,
    )
    from pytest_torch.core.fingerprint import HardwareFingerprint, hardware_fingerprint

#: public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "assert_close": "pytest_torch.core.compare",
    "Mismatch": "pytest_torch.core.compare",
    "TensorMismatchError": "pytest_torch.core.compare",
    "HardwareFingerprint": "pytest_torch.core.fingerprint",
    "hardware_fingerprint": "pytest_torch.core.fingerprint",
}

__all__ = [
    "HardwareFingerprint",
    "Mismatch",
    "TensorMismatchError",
    "assert_close",
    "hardware_fingerprint",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pytest_torch' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        distribution = "pytest-torch-" + module_name.split(".")[1]
        raise ImportError(
            f"pytest_torch.{name} comes from {distribution}, which is not installed"
            f" ({exc}). Install it with: pip install {distribution}"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
