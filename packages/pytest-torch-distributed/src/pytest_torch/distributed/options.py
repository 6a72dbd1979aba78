"""The distributed plugin's options, each with its ini twin. No torch here."""

from __future__ import annotations

import pytest

from pytest_torch.core.options import Option, number

TIMEOUT = "--torch-distributed-timeout"

TIMEOUT_OPTION = Option(
    TIMEOUT,
    "torch_distributed_timeout",
    "Seconds a torch_distributed test may run on its ranks before it fails as a hang,"
    " with every rank's Python stack (a marker's timeout= wins).",
    parse=number(example="60"),
    default="60",
    metavar="SECONDS",
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "torch-distributed", "torch-distributed: tests on N torch.distributed ranks"
    )
    TIMEOUT_OPTION.add(parser, group)
