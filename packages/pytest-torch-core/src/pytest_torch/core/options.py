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


def _usage_error(config: pytest.Config, ini: str, flag: str, expected: str, value: Any,
                 example: str) -> pytest.UsageError:  # fmt: skip
    source = option_source(config, ini, flag)
    return pytest.UsageError(
        f"{source}: expected {expected}, got {value!r}. Example: {flag}={example}"
    )


def int_option(
    config: pytest.Config,
    ini: str,
    flag: str,
    *,
    minimum: int,
    maximum: int | None = None,
    example: int | None = None,
) -> int:
    """The whole-number value of an option declared with ``add_option_with_ini``; a
    usage error naming where the value came from (the flag, or the ini file) when it is
    not a whole number in range."""
    value = option_or_ini(config, ini)
    text = str(value).strip()
    digits = text[1:] if text[:1] in "+-" else text
    number = int(text) if digits.isascii() and digits.isdigit() else None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        expected = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        shown = example if example is not None else max(minimum, 5)
        raise _usage_error(config, ini, flag, f"a whole number {expected}", value, str(shown))
    return number


def float_option(
    config: pytest.Config,
    ini: str,
    flag: str,
    *,
    zero: bool = False,
    example: str = "1.0",
) -> float:
    """The positive (or, with ``zero``, non-negative) finite number value of an option
    declared with ``add_option_with_ini``; a usage error naming its source otherwise."""
    import math

    value = option_or_ini(config, ini)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or not (number > 0 or (zero and number == 0)):
        expected = "a finite number >= 0" if zero else "a positive, finite number"
        raise _usage_error(config, ini, flag, expected, value, example)
    return number
