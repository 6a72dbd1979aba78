"""Markers declared once: the ``--markers`` help line and the argument binding come from
one ``MarkerSpec``, so a marker's help and the arguments it accepts cannot drift apart.

A plugin declares its marker, registers it in ``pytest_configure`` and binds a test's
marker arguments to names before checking their values::

    BUDGET = MarkerSpec(
        "torch_max_memory", "fail the test if ...", positional=("mb",),
        keywords={"device": None}, example="@pytest.mark.torch_max_memory(mb=512)",
    )
    BUDGET.register(config)
    values = BUDGET.bind(mark.args, mark.kwargs, f"{item.nodeid}: @pytest.mark.{BUDGET.name}")

``bind`` raises ``ValueError`` for unknown keywords and for an argument given twice or
too many positional arguments, with the example; the values themselves are the
plugin's to check (a missing required argument is ``None``). ``BUDGET.mark_on(node)``
is the test's own marker, for an item at run time or a ``Metafunc`` at collection.

Every package declares its markers in its own ``markers`` module, as core does here
with ``torch_devices``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest


def definition_of(node: pytest.Item | pytest.Metafunc) -> pytest.Item:
    """The test itself: an item as it is, a ``Metafunc``'s function definition (whose
    ``nodeid`` names the test in a collection error)."""
    return node.definition if isinstance(node, pytest.Metafunc) else node


def _and(words: Sequence[str]) -> str:
    """["a"] -> "a"; ["a", "b", "c"] -> "a, b and c"."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


@dataclass(frozen=True)
class MarkerSpec:
    """A marker's name, the one-line help after its signature, its parameters and an
    example of its use."""

    name: str
    summary: str
    #: parameters that may be given by position (or by keyword), in order
    positional: tuple[str, ...] = ()
    #: parameter -> default shown in the help; positional ones without an entry are
    #: required, other entries are keyword-only
    defaults: Mapping[str, object] = field(default_factory=dict)
    #: the name of a variable positional parameter (``torch_devices(*types)``)
    variadic: str | None = None
    example: str = ""

    def signature(self) -> str:
        """``ms, stat='median'`` — as in the ``--markers`` help."""
        parts = [
            name if name not in self.defaults else f"{name}={self.defaults[name]!r}"
            for name in self.positional
        ]
        if self.variadic:
            parts.append(f"*{self.variadic}")
        parts += [
            f"{name}={default!r}"
            for name, default in self.defaults.items()
            if name not in self.positional
        ]
        return ", ".join(parts)

    def help_line(self) -> str:
        """The ``--markers`` line: ``name(signature): summary``."""
        call = f"({self.signature()})" if self.positional or self.defaults or self.variadic else ""
        return f"{self.name}{call}: {self.summary}"

    def register(self, config: pytest.Config) -> None:
        """Declare the marker (for ``--markers`` and ``--strict-markers``)."""
        config.addinivalue_line("markers", self.help_line())

    def mark_on(self, node: pytest.Item | pytest.Metafunc) -> pytest.Mark | None:
        """This marker on a test (the closest one: the function's, else its class's or
        module's), or None; ``node`` an item (a function definition is one) or, at
        collection, a ``Metafunc``."""
        return definition_of(node).get_closest_marker(self.name)

    def bind(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        prefix: str,
        *,
        defaults: Mapping[str, object] | None = None,
        example: str | None = None,
    ) -> dict[str, Any]:
        """Parameter name -> value (defaults filled in, ``None`` for a missing required
        one; the variadic parameter, if any, -> the tuple of extra positional values).
        ``prefix`` starts every error, e.g. ``"test_x.py::test_y: @pytest.mark.name"``;
        ``defaults`` and ``example`` replace the declared ones (settings from options,
        the same checks for a function that takes the marker's arguments)."""
        shown = self.example if example is None else example
        example = f" Example: {shown}" if shown else ""
        filled = {**self.defaults, **(defaults or {})}
        names = [*self.positional, *(n for n in self.defaults if n not in self.positional)]
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            if not names:
                takes = (
                    f"{self.variadic} as positional arguments" if self.variadic else "no arguments"
                )
                raise ValueError(
                    f"{prefix} takes {takes}, got keyword(s) {', '.join(unknown)}.{example}"
                )
            raise ValueError(
                f"{prefix} got unknown keyword(s) {', '.join(unknown)}; it takes"
                f" {_and([f'{n}=' for n in names])}.{example}"
            )
        extra = tuple(args[len(self.positional) :])
        given_twice = [n for n in self.positional[: len(args)] if n in kwargs]
        if given_twice or (extra and not self.variadic):
            if not self.positional:
                raise ValueError(f"{prefix} takes no arguments, got {tuple(args)!r}.{example}")
            raise ValueError(f"{prefix} takes {_and(list(self.positional))} once.{example}")
        values: dict[str, Any] = {}
        for index, name in enumerate(self.positional):
            if index < len(args):
                values[name] = args[index]
            else:
                values[name] = kwargs.get(name, filled.get(name))
        for name in self.defaults:
            if name not in self.positional:
                values[name] = kwargs.get(name, filled.get(name))
        if self.variadic:
            values[self.variadic] = extra
        return values


DEVICES = MarkerSpec(
    "torch_devices",
    "run this test only on these device types (cpu, cuda, xpu, mps); where none of them is"
    " available it is skipped with the reason.",
    variadic="types",
    example='@pytest.mark.torch_devices("cuda", "xpu")',
)
