"""The CI options of a session as resolved at start-up and never changed, kept in
``config.stash[settings_key]``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class CiSettings:
    """The CI options of a session."""

    #: where failure artifacts are saved (None: nowhere)
    artifacts: Path | None
    #: where pytest was started, which the artifacts' paths are shown from
    root: Path
    #: the pytest-html report this run writes, if any
    html_report: Path | None
    #: GitHub annotations and job summary (--torch-github-annotations)
    annotations: bool


settings_key = pytest.StashKey[CiSettings]()
