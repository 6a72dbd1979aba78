"""Records as flat, readable ``user_properties``, shared by the plugins that report figures.

A record is a key (a test id, a device) with a few named fields; each field becomes one
property named ``<prefix><key>.<field>``, e.g. ``torch_perf.t.py::x.measured_ms``.
pytest writes these into JUnit XML and pytest-xdist carries them from workers to the
controller, where :func:`decode` groups them again. A key may contain dots (test ids do):
the field is what follows the last dot. Values may come back as strings after such a
trip, so figures are read with :func:`number`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: decimal places floats are rounded to, so XML stays readable and stable
DIGITS = 6


def encode(
    prefix: str, key: str, fields: Mapping[str, object], *, digits: int | None = DIGITS
) -> list[tuple[str, object]]:
    """The properties of one record, in the order of ``fields``: fields that are None are
    left out, floats are rounded to ``digits`` places (None: kept as they are).
    ``prefix`` is the start of every name, its separator included (``"torch_perf."``)."""
    properties: list[tuple[str, object]] = []
    for field, value in fields.items():
        if "." in field:
            raise ValueError(f"a property field cannot contain a dot: {field!r}")
        if value is None:
            continue
        if digits is not None and isinstance(value, float):
            value = round(value, digits)
        properties.append((f"{prefix}{key}.{field}", value))
    return properties


def decode(properties: Iterable[tuple[str, object]], prefix: str) -> dict[str, dict[str, object]]:
    """The records under ``prefix``: {key: {field: value}}, keys and fields in the order
    they first appear (a repeated property: the last value wins). Other properties, and
    names under ``prefix`` without a key, are ignored."""
    records: dict[str, dict[str, object]] = {}
    for name, value in properties:
        if not isinstance(name, str) or not name.startswith(prefix):
            continue
        key, dot, field = name[len(prefix) :].rpartition(".")
        if dot and field:
            records.setdefault(key, {})[field] = value
    return records


def number(value: object) -> float | None:
    """``value`` as a float, whether it is still a number or became a string on the way
    (JUnit XML, pytest-xdist); None when it is no number (a bool is not one either)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value if isinstance(value, (int, float)) else str(value))
    except (ValueError, OverflowError):
        return None


def values_of(properties: Iterable[tuple[str, object]], name: str) -> list[object]:
    """The values of the plain property ``name`` (one that is no record), in order."""
    return [value for property_name, value in properties if property_name == name]
