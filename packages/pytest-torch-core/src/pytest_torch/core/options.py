"""Options with ini twins, the way every plugin of the family declares them, and core's
own options.

A command-line option is declared with ``default=None`` so that an unset flag falls
back to its ini value; the command line wins. The ini name is the option's dest.

A package declares each of its options once, as an :class:`Option`: the flag, the ini
name, the help, the default and how its value is read (``parse``: :func:`text`,
:func:`switch`, :func:`whole`, :func:`number`, :func:`checked`), so the value's type
is stated where the option is::

    LEAK_ITERATIONS = "--torch-leak-iterations"
    LEAK_ITERATIONS_OPTION = Option(
        LEAK_ITERATIONS, "torch_leak_iterations", "Runs after the warm-up.",
        parse=whole(minimum=2), default="5", metavar="N",
    )
    LEAK_ITERATIONS_OPTION.add(parser, group)      # pytest_addoption
    iterations = LEAK_ITERATIONS_OPTION.read(config)  # an int, or a usage error

A bad value is a ``pytest.UsageError`` that names where it came from (the flag, or the
ini name and file) and what was expected. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import pytest

from pytest_torch.core import devices
from pytest_torch.core.settings import CoreSettings

T = TypeVar("T")


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


def _whole(config: pytest.Config, ini: str, flag: str, value: Any, minimum: int,
           maximum: int | None, example: int | None) -> int:  # fmt: skip
    text = str(value).strip()
    digits = text[1:] if text[:1] in "+-" else text
    number = int(text) if digits.isascii() and digits.isdigit() else None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        expected = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        shown = example if example is not None else max(minimum, 5)
        raise _usage_error(config, ini, flag, f"a whole number {expected}", value, str(shown))
    return number


def _number(config: pytest.Config, ini: str, flag: str, value: Any, zero: bool,
            example: str) -> float:  # fmt: skip
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or not (number > 0 or (zero and number == 0)):
        expected = "a finite number >= 0" if zero else "a positive, finite number"
        raise _usage_error(config, ini, flag, expected, value, example)
    return number


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
    return _whole(config, ini, flag, value, minimum, maximum, example)


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
    return _number(config, ini, flag, option_or_ini(config, ini), zero, example)


#: how an option's value in force (``value``: the command line's, else the ini file's)
#: becomes its type; a pytest.UsageError naming the option's source when it is bad
Parse = Callable[["Option[Any]", pytest.Config, Any], T]


@dataclass(frozen=True)
class Option(Generic[T]):
    """One option and its ini twin, declared once: :meth:`add` declares both,
    :meth:`read` returns the value in force as the declared type."""

    flag: str
    ini: str
    help: str
    parse: Parse[T]
    #: the ini default, also what an unset option reads as (None: no value)
    default: str | None = None
    metavar: str | None = None
    #: "switch": an on/off flag (``--flag``, or ``ini = true``); "value": ``--flag=VALUE``
    kind: Literal["value", "switch"] = "value"
    #: what the flag given alone means (``--flag`` is ``--flag=const``); None: the flag
    #: needs a value
    const: str | None = None

    def add(self, parser: pytest.Parser, group: pytest.OptionGroup) -> None:
        """Declare the flag in ``group`` (``--help``) and its ini twin."""
        if self.kind == "switch":
            add_flag_with_ini(parser, group, self.flag, ini=self.ini, help=self.help)
        elif self.const is None:
            add_option_with_ini(
                parser,
                group,
                self.flag,
                ini=self.ini,
                help=self.help,
                default=self.default,
                metavar=self.metavar,
            )
        else:
            shown = "" if self.default is None else f" Default: {self.default}."
            group.addoption(
                self.flag,
                dest=self.ini,
                nargs="?",
                const=self.const,
                default=None,
                metavar=self.metavar,
                help=f"{self.help}{shown} (ini: {self.ini})",
            )
            ini_help = f"{self.help} (command line: {self.flag})"
            parser.addini(self.ini, ini_help, default=self.default)

    def given(self, config: pytest.Config) -> bool:
        """Whether the command line gave the option (else the ini value is in force)."""
        return config.getoption(self.ini, default=None) is not None

    def raw(self, config: pytest.Config) -> Any:
        """The value in force as pytest holds it: the command line's, else the ini's."""
        return option_or_ini(config, self.ini)

    def source(self, config: pytest.Config) -> str:
        """Where the value in force came from: the flag, or the ini name and file."""
        return option_source(config, self.ini, self.flag)

    def read(self, config: pytest.Config) -> T:
        """The value in force, parsed; a usage error naming its source when it is bad."""
        return self.parse(self, config, self.raw(config))

    def read_early(self, early_config: pytest.Config) -> T:
        """:meth:`read` before ``pytest_configure`` (in ``pytest_load_initial_conftests``),
        from the arguments pytest has parsed so far, else the ini file."""
        value = getattr(early_config.known_args_namespace, self.ini, None)
        if value is None:
            value = early_config.getini(self.ini)
        return self.parse(self, early_config, value)

    def error(self, config: pytest.Config, text: str) -> pytest.UsageError:
        """A usage error that starts with the value's source."""
        return pytest.UsageError(f"{self.source(config)}: {text}")


def text(option: Option[Any], config: pytest.Config, value: Any) -> str | None:
    """The value as text; None when it is unset or empty."""
    return None if value is None or value == "" else str(value)


def unparsed(option: Option[Any], config: pytest.Config, value: Any) -> object:
    """The value as given (for options parsed later, against what the machine has)."""
    return value


def switch(option: Option[Any], config: pytest.Config, value: Any) -> bool:
    """On or off (an on/off flag, ``kind="switch"``)."""
    return bool(value)


def whole(*, minimum: int, maximum: int | None = None, example: int | None = None) -> Parse[int]:
    """A whole number from ``minimum`` (to ``maximum``)."""

    def parse(option: Option[Any], config: pytest.Config, value: Any) -> int:
        return _whole(config, option.ini, option.flag, value, minimum, maximum, example)

    return parse


def number(*, zero: bool = False, example: str = "1.0") -> Parse[float]:
    """A positive (or, with ``zero``, non-negative) finite number."""

    def parse(option: Option[Any], config: pytest.Config, value: Any) -> float:
        return _number(config, option.ini, option.flag, value, zero, example)

    return parse


def checked(parse_value: Callable[[Any, str], T]) -> Parse[T]:
    """The value as ``parse_value(value, source)`` reads it; its ValueError, which
    starts with the source it is handed, becomes a usage error."""

    def parse(option: Option[Any], config: pytest.Config, value: Any) -> T:
        try:
            return parse_value(value, option.source(config))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None

    return parse


# -- core's own options --------------------------------------------------------------

#: core's flags, each named once
DEVICE = "--torch-device"
SEED = "--torch-seed"


def parse_base_seed(value: object, source: str) -> int:
    """A base seed from an option or ini value; ValueError with a readable message."""
    given = str(value).strip()
    try:
        seed = int(given, 0)
    except ValueError:
        raise ValueError(
            f"{source}: expected a non-negative integer seed, got {given!r}. Example: {SEED}=1234"
        ) from None
    if seed < 0 or seed >= 2**63:
        raise ValueError(f"{source}: the seed must be between 0 and 2**63-1, got {seed}.")
    return seed


def _device_types(value: object, source: str) -> list[str] | None:
    return devices.parse_device_types(str(value), source=source)


DEVICE_OPTION = Option(
    DEVICE,
    "torch_device",
    "Device types that tests using the torch_device fixture run on: a comma list of cpu,"
    " cuda, xpu, mps, or 'all' available ones.",
    parse=checked(_device_types),
    default="all",
    metavar="TYPES",
)
SEED_OPTION = Option(
    SEED,
    "torch_seed",
    "Base seed of the torch_seed fixture; each test derives its own seed from it and its test id.",
    parse=checked(parse_base_seed),
    default="0",
    metavar="N",
)
#: core's options, in ``--help`` order
OPTIONS: tuple[Option[Any], ...] = (DEVICE_OPTION, SEED_OPTION)


def add_options(parser: pytest.Parser) -> None:
    """Declare core's options, each with its ini twin, in the ``torch`` group."""
    group = parser.getgroup("torch", "torch: devices, seeds and tensors (pytest-torch)")
    for option in OPTIONS:
        option.add(parser, group)


def read_settings(config: pytest.Config) -> CoreSettings:
    """The session's core options; ``pytest.UsageError`` for a bad value."""
    device_types = DEVICE_OPTION.read(config)
    return CoreSettings(
        device_types=None if device_types is None else tuple(device_types),
        device_source=DEVICE_OPTION.source(config),
        base_seed=SEED_OPTION.read(config),
    )
