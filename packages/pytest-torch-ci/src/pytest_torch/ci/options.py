"""The CI plugin's options: declared (each flag named once, with its ini twin) and read
into the session's :class:`~pytest_torch.ci.settings.CiSettings`, or a usage error that
names the option and what was expected. No torch here: this runs on every start-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_torch.ci.settings import CiSettings
from pytest_torch.core.options import Option, text
from pytest_torch.core.paths import unwritable

#: the CI flags, each named once
FAILURE_ARTIFACTS = "--torch-failure-artifacts"
GITHUB_ANNOTATIONS = "--torch-github-annotations"

_SWITCH = {"on": True, "true": True, "yes": True, "1": True}
_SWITCH.update({"off": False, "false": False, "no": False, "0": False})


def _annotations(option: Option[Any], config: pytest.Config, value: Any) -> bool:
    """on, off, or auto: on under GitHub Actions."""
    given = str(value).strip().lower()
    if given == "auto":
        return os.environ.get("GITHUB_ACTIONS") == "true"
    if given not in _SWITCH:
        raise option.error(config, f"expected on, off or auto, got {given!r}")
    return _SWITCH[given]


FAILURE_ARTIFACTS_OPTION = Option(
    FAILURE_ARTIFACTS,
    "torch_failure_artifacts",
    "Save a heatmap PNG and the tensors (.pt) of every tensor mismatch of a failing test"
    " under DIR/<test id>/, and name them in the error.",
    parse=text,
    metavar="DIR",
)
GITHUB_ANNOTATIONS_OPTION = Option(
    GITHUB_ANNOTATIONS,
    "torch_github_annotations",
    "GitHub Actions error annotations for failed tests and a job summary: on, off, or auto"
    " (on when GITHUB_ACTIONS=true).",
    parse=_annotations,
    default="auto",
    metavar="on|off|auto",
    const="on",
)


def add_options(parser: pytest.Parser) -> None:
    """Declare the CI options, each with its ini twin, in one ``--help`` group."""
    group = parser.getgroup("torch-ci", "torch-ci: failures readable in CI")
    for option in (FAILURE_ARTIFACTS_OPTION, GITHUB_ANNOTATIONS_OPTION):
        option.add(parser, group)


def html_report_path(config: pytest.Config) -> Path | None:
    """The pytest-html report this run writes (its ``--html``), if any."""
    if not config.pluginmanager.hasplugin("html"):
        return None
    path = config.getoption("htmlpath", default=None)
    if not path:
        return None
    report = Path(str(path)).expanduser()
    return report if report.is_absolute() else config.invocation_params.dir / report


def read_settings(config: pytest.Config) -> CiSettings:
    """The session's CI options; ``pytest.UsageError`` for a bad value."""
    root = config.invocation_params.dir
    value = FAILURE_ARTIFACTS_OPTION.read(config)
    directory = None
    if value:
        directory = Path(value)
        directory = directory if directory.is_absolute() else root / directory
    html = html_report_path(config)  # with pytest-html, its report gets the pictures
    if directory is None and html is not None:  # the pictures go beside the report
        directory = html.parent / f"{html.stem}-torch-failure-artifacts"
    if directory is not None:
        problem = unwritable(directory, folder=True)
        if problem is not None:
            source = FAILURE_ARTIFACTS_OPTION.source(config) if value else FAILURE_ARTIFACTS
            raise pytest.UsageError(
                f"{source}: cannot save failure artifacts in {directory}: {problem}."
                " Choose a writable folder."
            )
    return CiSettings(
        artifacts=directory,
        root=root,
        html_report=html,
        annotations=GITHUB_ANNOTATIONS_OPTION.read(config),
    )
