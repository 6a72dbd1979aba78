"""pytest wiring of the determinism plugin (entry point ``torch_determinism``).

``--torch-deterministic`` turns deterministic mode on for each test that uses the
``torch_seed`` fixture, through core's ``pytest_torch_seeded`` hook, and turns it back
off at the test's teardown. cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` before the first
CUDA matrix product of the process (see ``cublas``): the plugin sets it when the initial
conftests are about to be imported, before any of them can touch CUDA, or at configure
time for a plugin registered later (a conftest's ``pytest_plugins``), and removes it
when pytest is done. The checks themselves are plain functions (``assertion``,
``diagnosis``).
"""

from __future__ import annotations

import os

import pytest

from pytest_torch.core.options import add_flag_with_ini, option_or_ini

pytest_plugins = ["torch_core"]


class DeterminismSettings:
    # a plain class, not a dataclass: building one costs start-up time on every run
    def __init__(self, enabled: bool, warn_only: bool) -> None:
        self.enabled = enabled
        self.warn_only = warn_only
        #: whether the plugin set CUBLAS_WORKSPACE_CONFIG (and removes it at the end)
        self.cublas_set = False
        #: the header's line about CUBLAS_WORKSPACE_CONFIG
        self.cublas_line: str | None = None


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


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Plugins from entry points and -p are registered by now; the command line is
    # parsed only into known_args_namespace, and the ini file is read.
    def early(name: str) -> bool:
        value = getattr(early_config.known_args_namespace, name, None)
        return bool(early_config.getini(name) if value is None else value)

    _set_up(early_config, early("torch_deterministic"), early("torch_deterministic_warn_only"))


def pytest_configure(config: pytest.Config) -> None:
    if settings_key not in config.stash:  # registered after start-up: set up now
        _set_up(
            config,
            bool(option_or_ini(config, "torch_deterministic")),
            bool(option_or_ini(config, "torch_deterministic_warn_only")),
        )


def _set_up(config: pytest.Config, enabled: bool, warn_only: bool) -> None:
    settings = DeterminismSettings(enabled=enabled, warn_only=warn_only)
    config.stash[settings_key] = settings
    if not enabled:
        return
    from pytest_torch.determinism import cublas

    exported = os.environ.get(cublas.VARIABLE)
    if exported is not None:
        if cublas.is_deterministic(exported):
            settings.cublas_line = f"{cublas.VARIABLE}={exported} (exported)"
            return
        settings.cublas_line = (
            f"{cublas.describe(exported)} is exported, which is not deterministic:"
            f" export {cublas.EXPORT} instead (see the warning)"
        )
        _warn(
            config,
            f"--torch-deterministic: {cublas.describe(exported)} is exported, but torch accepts"
            f" only {' or '.join(cublas.DETERMINISTIC_VALUES)} under deterministic algorithms:"
            f" every CUDA matrix product in a test using torch_seed will raise. Export"
            f" {cublas.EXPORT} instead (or :16:8: less memory, maybe slower), or unset it and"
            f" the plugin sets {cublas.VALUE} for the session.",
        )
        return
    late = cublas.cuda_initialised()
    os.environ[cublas.VARIABLE] = cublas.VALUE
    settings.cublas_set = True
    config.add_cleanup(lambda: _restore(settings))
    settings.cublas_line = f"{cublas.EXPORT} (set for this session)"
    if late:
        settings.cublas_line += ", after CUDA was initialised (see the warning)"
        _warn(
            config,
            f"--torch-deterministic set {cublas.EXPORT}, but CUDA was already initialised (by"
            f" a plugin or conftest imported before), so a CUDA matrix product may have run"
            f" without it: torch and cuBLAS read the variable only at the first one, and if one"
            f" did, every CUDA matrix product under deterministic mode raises. Export it before"
            f" starting pytest: {cublas.EXPORT} pytest ...",
        )


def _warn(config: pytest.Config, message: str) -> None:
    config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=3)


def _restore(settings: DeterminismSettings) -> None:
    from pytest_torch.determinism import cublas

    # only our own value: a test or conftest that changed it since owns it now
    if settings.cublas_set and os.environ.get(cublas.VARIABLE) == cublas.VALUE:
        del os.environ[cublas.VARIABLE]
    settings.cublas_set = False


def pytest_torch_seeded(item: pytest.Item, seed: int) -> None:
    settings = item.config.stash[settings_key]
    if not settings.enabled:
        return
    from pytest_torch.determinism import flags

    before = flags.current()
    flags.apply(flags.deterministic(warn_only=settings.warn_only))
    item.addfinalizer(lambda: flags.apply(before))


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash[settings_key]
    if not settings.enabled:
        return None
    mode = " (warn only)" if settings.warn_only else ""
    lines = [f"torch: deterministic algorithms{mode} for tests using torch_seed"]
    if settings.cublas_line is not None:
        lines.append(f"torch: {settings.cublas_line}")
    return lines
