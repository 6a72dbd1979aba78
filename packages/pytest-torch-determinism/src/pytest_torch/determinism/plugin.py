"""pytest wiring of the determinism plugin (entry point ``torch_determinism``).

``--torch-deterministic`` turns deterministic mode on for each test that uses the
``torch_seed`` fixture, through core's ``pytest_torch_seeded`` hook, and turns it back
off at the test's teardown. When such a test fails because an op has no deterministic
implementation, its report gets a section saying that the flag (not the user) turned
deterministic mode on, which op refused, and how to run the test without it.

cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` before the first CUDA matrix product of the
process (see ``cublas``): the plugin sets it when the initial conftests are about to be
imported, before any of them can touch CUDA, or at configure time for a plugin
registered later (a conftest's ``pytest_plugins``), and removes it when pytest is done.
The checks themselves are plain functions (``assertion``, ``diagnosis``); the options'
values live in ``settings``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from pytest_torch.core.options import add_flag_with_ini, option_or_ini
from pytest_torch.core.reports import add_section
from pytest_torch.determinism.settings import DeterminismSettings, settings_key

pytest_plugins = ["torch_core"]

#: set on a test for which --torch-deterministic turned deterministic mode on
applied_key = pytest.StashKey[bool]()


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
    config.pluginmanager.register(AppliedCounter(settings), "torch_determinism_applied")
    from pytest_torch.determinism import cublas

    if not cublas.cuda_build():  # no cuBLAS to set up: a CPU-only build of torch
        return
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
    item.stash[applied_key] = True
    item.addfinalizer(lambda: flags.apply(before))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "setup" and item.stash.get(applied_key, False):
        # a plain attribute travels with the report to the xdist controller
        report.torch_deterministic_applied = True  # type: ignore[attr-defined]
    if report.failed and call.excinfo is not None and item.stash.get(applied_key, False):
        from pytest_torch.determinism import explanations

        text = explanations.of_failure(item, call.excinfo.value, report.longreprtext)
        if text is not None:
            add_section(report, "torch-deterministic", text)
    return report


class AppliedCounter:
    """Counts the tests set up in this run and those --torch-deterministic acted on (the
    xdist controller counts its workers' reports), for core's end-of-run section."""

    def __init__(self, settings: DeterminismSettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            self.settings.tests += 1
            self.settings.applied += bool(getattr(report, "torch_deterministic_applied", False))

    def pytest_torch_reach_lines(self, config: pytest.Config) -> list[str] | None:
        if not self.settings.tests:
            return None
        return [applied_line(self.settings.applied, self.settings.tests)]


def applied_line(applied: int, tests: int) -> str:
    """The end-of-run line on how many tests --torch-deterministic acted on."""
    if applied:
        return (
            f"torch: --torch-deterministic applied to {applied} of {tests} tests (those using"
            " torch_seed)"
        )
    return (
        f"torch: --torch-deterministic applied to none of the {tests} tests: it acts on tests"
        " that use the torch_seed fixture, and none of these did, so this run was not made"
        " deterministic. Request torch_seed in the tests to check (in a module:"
        ' pytestmark = pytest.mark.usefixtures("torch_seed"); for a whole suite: an autouse'
        " fixture in conftest.py that requests it)."
    )


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    settings = config.stash[settings_key]
    if not settings.enabled:
        return None
    mode = " (warn only)" if settings.warn_only else ""
    lines = [f"torch: deterministic algorithms{mode} for tests using torch_seed"]
    if settings.cublas_line is not None:
        lines.append(f"torch: {settings.cublas_line}")
    return lines
