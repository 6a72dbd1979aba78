"""What a failure under ``--torch-deterministic`` is told: the flag, not the user's
code, turned deterministic algorithms on, so an op that refuses them, or NaN where
torch used to leave memory uninitialised, is explained under the failure with the
command that runs the test as before."""

from __future__ import annotations

import re

import pytest

from pytest_torch.core.ids import plain_nodeid
from pytest_torch.core.rerun import rerun_command
from pytest_torch.determinism import flags
from pytest_torch.determinism.options import (
    DETERMINISTIC,
    DETERMINISTIC_OPTION,
    WARN_ONLY,
    WARN_ONLY_OPTION,
)
from pytest_torch.determinism.settings import settings_key


def of_failure(item: pytest.Item, error: BaseException, text: str) -> str | None:
    """The section for a failed test that deterministic mode was applied to, or None."""
    op = refused_op(error)
    if op is not None:
        return refusal_section(item, op)
    if mentions_nan(text):
        return nan_fill_section(item)
    return None


def _switch_and_rerun(item: pytest.Item) -> tuple[str, str]:
    """What turned deterministic mode on (the flag or the ini), and the command that runs
    the test without it, from where pytest was started."""
    ini = DETERMINISTIC_OPTION.ini
    if not DETERMINISTIC_OPTION.given(item.config):
        command = rerun_command(item.config, plain_nodeid(item), ["-o", f"{ini}=false"])
        return f"{ini} = true (ini)", command
    command = f"{rerun_command(item.config, plain_nodeid(item))} (without {DETERMINISTIC})"
    return DETERMINISTIC, command


def mentions_nan(text: str) -> bool:
    return re.search(r"\bnan\b|isnan", text, re.IGNORECASE) is not None


def nan_fill_section(item: pytest.Item) -> str:
    """A failure that mentions NaN under deterministic mode, which fills uninitialised
    memory with NaN: what the flag changed, and how to tell whether that is the cause."""
    switch, command = _switch_and_rerun(item)
    return (
        f"This failure mentions NaN, and {switch} turned deterministic algorithms on for"
        " this test (it uses torch_seed), which also fills the memory torch leaves"
        " uninitialised (torch.empty, empty_like, new_empty, resize_) with NaN"
        " (torch.utils.deterministic.fill_uninitialized_memory). A test that reads such"
        " memory before writing it gets NaN here, and whatever the memory held before in a"
        " plain run.\n"
        f"If it passes without the flag, that is the cause: {command}; then write the memory"
        " before reading it (torch.zeros instead of torch.empty, or fill it)."
    )


def refused_op(error: BaseException) -> str | None:
    """The op that refused deterministic mode, anywhere in the error's chain."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        op = flags.op_without_deterministic_implementation(current)
        if op is not None:
            return op
        current = current.__cause__ or current.__context__
    return None


def refusal_section(item: pytest.Item, op: str) -> str:
    """An op without a deterministic implementation refused (or warned, turned error)."""
    switch, command = _switch_and_rerun(item)
    if item.config.stash[settings_key].warn_only:
        what = (
            f"{switch} with {WARN_ONLY} turned deterministic algorithms on"
            f" for this test (it uses torch_seed), and {op} has no deterministic"
            f" implementation: torch warned, and the warning was turned into an error (-W"
            f" error or filterwarnings), which is the error above."
        )
        keep = (
            "Or keep the flag and let that warning through (filterwarnings: default::UserWarning)"
        )
    else:
        what = (
            f"{switch} turned deterministic algorithms on for this test (it uses torch_seed),"
            f" and {op} has no deterministic implementation, so torch raised the error above:"
            f" the 'you set torch.use_deterministic_algorithms(True)' in it is the plugin's"
            f" doing, not your code's."
        )
        keep = (
            "Or keep the flag and let such ops warn instead of raising:"
            f" {WARN_ONLY} (ini: {WARN_ONLY_OPTION.ini} = true)"
        )
    return (
        f"{what}\n"
        f"Run this test as before with: {command}\n"
        f"{keep}; or replace {op} with an op that has a deterministic implementation."
    )
