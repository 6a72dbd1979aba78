"""The distributed plugin's options, each with its ini twin. No torch here."""

from __future__ import annotations

import re

import pytest

from pytest_torch.core.options import Option, checked, number

TIMEOUT = "--torch-distributed-timeout"
RESTORE_ENV = "--torch-distributed-restore-env"

TIMEOUT_OPTION = Option(
    TIMEOUT,
    "torch_distributed_timeout",
    "Seconds a torch_distributed test may run on its ranks before it fails as a hang,"
    " with every rank's Python stack (a marker's timeout= wins).",
    parse=number(example="60"),
    default="60",
    metavar="SECONDS",
)

#: variables libraries set on purpose in every test (Lightning's seed_everything, and
#: Fabric's accelerator check)
KNOWN_ENV = "PL_GLOBAL_SEED,PL_SEED_WORKERS,PYTORCH_NVML_BASED_CUDA_CHECK"


def _patterns(value: object, source: str) -> tuple[str, ...]:
    names = tuple(name for name in re.split(r"[\s,]+", str(value or "").strip()) if name)
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z0-9_*?\[\]!]+", name)]
    if bad:
        raise ValueError(
            f"{source}: expected environment variable names or patterns such as"
            f" PL_GLOBAL_SEED or MYLIB_*, separated by commas; got {bad[0]!r}."
            f" Example: {RESTORE_ENV}={KNOWN_ENV},MYLIB_*"
        )
    return names


RESTORE_ENV_OPTION = Option(
    RESTORE_ENV,
    "torch_distributed_restore_env",
    "Environment variables (names or patterns, comma-separated) that a test may change"
    " in its ranks: the ranks undo those changes after the test instead of being"
    " replaced (a change to any other variable replaces them).",
    parse=checked(_patterns),
    default=KNOWN_ENV,
    metavar="NAMES",
)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "torch-distributed", "torch-distributed: tests on N torch.distributed ranks"
    )
    TIMEOUT_OPTION.add(parser, group)
    RESTORE_ENV_OPTION.add(parser, group)
