"""pytest wiring of the determinism plugin (entry point ``torch_determinism``).

``--torch-deterministic`` turns deterministic mode on for each test that uses the
``torch_seed`` fixture, through core's ``pytest_torch_seeded`` hook, and turns it back
off at the test's teardown. The checks themselves are plain functions
(``assertion``, ``diagnosis``).
"""

from __future__ import annotations

import os
import sys

import pytest

from pytest_torch.core.options import add_flag_with_ini, option_or_ini

pytest_plugins = ["torch_core"]

#: cuBLAS needs this before its first use to pick deterministic workspaces (CUDA >= 10.2)
CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_VALUE = ":4096:8"


class DeterminismSettings:
    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, enabled: bool, warn_only: bool) -> None:
        self.enabled = enabled
        self.warn_only = warn_only
        self.cublas_set = False


settings_key = pytest.StashKey[DeterminismSettings]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_torch.core.loading import require_core

    require_core(pluginmanager, "torch_determinism")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-determinism", "torch-determinism: deterministic mode")
    add_flag_with_ini(
        parser,
        group,
        "--torch-deterministic",
        ini="torch_deterministic",
        help="Deterministic algorithms (and cuDNN/cuBLAS settings) for every test that"
        " uses torch_seed, restored after each test.",
    )
    add_flag_with_ini(
        parser,
        group,
        "--torch-deterministic-warn-only",
        ini="torch_deterministic_warn_only",
        help="With --torch-deterministic: ops without a deterministic implementation"
        " warn instead of raising.",
    )


def pytest_configure(config: pytest.Config) -> None:
    settings = DeterminismSettings(
        enabled=bool(option_or_ini(config, "torch_deterministic")),
        warn_only=bool(option_or_ini(config, "torch_deterministic_warn_only")),
    )
    config.stash[settings_key] = settings
    if settings.enabled and CUBLAS_VARIABLE not in os.environ:
        settings.cublas_set = True
        os.environ[CUBLAS_VARIABLE] = CUBLAS_VALUE
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    f"--torch-deterministic set {CUBLAS_VARIABLE}={CUBLAS_VALUE} after CUDA"
                    f" was initialised (by a conftest or plugin), so cuBLAS may not use it and"
                    f" matrix products can raise under deterministic algorithms. Export it"
                    f" before starting pytest: {CUBLAS_VARIABLE}={CUBLAS_VALUE} pytest ..."
                ),
                stacklevel=2,
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    settings = config.stash.get(settings_key, None)
    if settings is not None and settings.cublas_set:
        os.environ.pop(CUBLAS_VARIABLE, None)
        settings.cublas_set = False


def pytest_torch_seeded(item: pytest.Item, seed: int) -> None:
    settings = item.config.stash[settings_key]
    if not settings.enabled:
        return
    from pytest_torch.determinism import flags

    before = flags.current()
    flags.apply(flags.deterministic(warn_only=settings.warn_only))
    item.addfinalizer(lambda: flags.apply(before))


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash[settings_key]
    if not settings.enabled:
        return None
    mode = " (warn only)" if settings.warn_only else ""
    return f"torch: deterministic algorithms{mode} for tests using torch_seed"
