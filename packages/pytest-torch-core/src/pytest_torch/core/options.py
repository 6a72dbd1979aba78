"""Options with ini twins, the way every plugin of the family declares them.

A command-line option is declared with ``default=None`` so that an unset flag falls
back to its ini value; the command line wins. The ini name is the option's dest.
"""

from __future__ import annotations

from typing import Any

import pytest


def add_option_with_ini(
    parser: pytest.Parser,
    group: pytest.OptionGroup,
    flag: str,
    *,
    ini: str,
    help: str,
    default: str | None,
    metavar: str | None = None,
) -> None:
    """Declare ``flag`` in ``group`` and its ini twin ``ini`` (a string value)."""
    shown = "" if default is None else f" Default: {default}."
    group.addoption(
        flag,
        dest=ini,
        default=None,
        metavar=metavar,
        help=f"{help}{shown} (ini: {ini})",
    )
    parser.addini(ini, f"{help} (command line: {flag})", default=default)


def option_or_ini(config: pytest.Config, ini: str) -> Any:
    """The command-line value of an option declared above, else its ini value."""
    value = config.getoption(ini, default=None)
    if value is not None:
        return value
    return config.getini(ini)


def option_source(config: pytest.Config, ini: str, flag: str) -> str:
    """Where the value in force came from, for error messages: the flag or the ini name."""
    if config.getoption(ini, default=None) is not None:
        return flag
    inipath = config.inipath.name if config.inipath else "the ini file"
    return f"{ini} (in {inipath})"


def add_flag_with_ini(
    parser: pytest.Parser,
    group: pytest.OptionGroup,
    flag: str,
    *,
    ini: str,
    help: str,
) -> None:
    """Declare an on/off ``flag`` and its boolean ini twin (``ini = true``)."""
    group.addoption(
        flag, dest=ini, action="store_const", const=True, default=None, help=f"{help} (ini: {ini})"
    )
    parser.addini(ini, f"{help} (command line: {flag})", type="bool", default=False)
