"""The determinism plugin's options: declared (each flag named once, with its ini twin)
and read into the session's :class:`~pytest_torch.determinism.settings.DeterminismSettings`.
No torch here: this runs on every pytest start-up."""

from __future__ import annotations

import pytest

from pytest_torch.core.options import Option, switch
from pytest_torch.determinism.settings import DeterminismSettings

#: the determinism flags, each named once
DETERMINISTIC = "--torch-deterministic"
WARN_ONLY = "--torch-deterministic-warn-only"

DETERMINISTIC_OPTION = Option(
    DETERMINISTIC,
    "torch_deterministic",
    "Deterministic algorithms (and cuDNN/cuBLAS settings) for every test that uses"
    " torch_seed, restored after each test.",
    parse=switch,
    kind="switch",
)
WARN_ONLY_OPTION = Option(
    WARN_ONLY,
    "torch_deterministic_warn_only",
    f"With {DETERMINISTIC}: ops without a deterministic implementation warn instead of raising.",
    parse=switch,
    kind="switch",
)


def add_options(parser: pytest.Parser) -> None:
    """Declare the determinism options, each with its ini twin, in one ``--help`` group."""
    group = parser.getgroup("torch-determinism", "torch-determinism: deterministic mode")
    for option in (DETERMINISTIC_OPTION, WARN_ONLY_OPTION):
        option.add(parser, group)


def read_settings(config: pytest.Config, *, early: bool = False) -> DeterminismSettings:
    """The session's determinism options; ``early``: before ``pytest_configure`` (from
    ``pytest_load_initial_conftests``, see :meth:`Option.read_early`)."""
    if early:
        return DeterminismSettings(
            DETERMINISTIC_OPTION.read_early(config), WARN_ONLY_OPTION.read_early(config)
        )
    return DeterminismSettings(DETERMINISTIC_OPTION.read(config), WARN_ONLY_OPTION.read(config))
