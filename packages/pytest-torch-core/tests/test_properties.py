"""Unit tests of the ``user_properties`` record codec."""

from __future__ import annotations

import math

import pytest

from pytest_torch.core.properties import decode, encode, number, values_of


def test_a_record_survives_the_round_trip_in_field_order():
    properties = encode("p.", "t.py::x", {"stat": "median", "ms": 1.5, "runs": 3})
    assert properties == [
        ("p.t.py::x.stat", "median"),
        ("p.t.py::x.ms", 1.5),
        ("p.t.py::x.runs", 3),
    ]
    assert decode(properties, "p.") == {"t.py::x": {"stat": "median", "ms": 1.5, "runs": 3}}


def test_keys_may_contain_dots_the_field_follows_the_last_one():
    key = "tests/a.b/test_x.py::test_y[1.5-cuda:0]"
    properties = encode("p.", key, {"ms": 2.0}) + encode("p.", "", {"ms": 3.0})
    assert properties[0] == (f"p.{key}.ms", 2.0)
    assert decode(properties, "p.") == {key: {"ms": 2.0}, "": {"ms": 3.0}}


def test_none_is_left_out_and_floats_are_rounded_unless_asked_not_to():
    properties = encode("p.", "k", {"a": None, "b": 1 / 3, "c": 7, "d": "x", "e": 0.0})
    assert properties == [("p.k.b", 0.333333), ("p.k.c", 7), ("p.k.d", "x"), ("p.k.e", 0.0)]
    assert encode("p.", "k", {"b": 1 / 3}, digits=None) == [("p.k.b", 1 / 3)]
    assert encode("p.", "k", {"b": 1 / 3}, digits=2) == [("p.k.b", 0.33)]
    assert encode("p.", "k", {}) == []


def test_a_field_cannot_contain_a_dot():
    with pytest.raises(ValueError, match="dot"):
        encode("p.", "k", {"a.b": 1})


def test_foreign_properties_are_ignored_and_order_is_kept():
    properties = [
        ("unrelated", 1),
        ("p_other.k.a", 2),  # a name that merely starts like the prefix
        ("p.second.a", 1),
        ("p.nokey", 3),  # no key after the prefix
        ("p.first.a", 2),
        ("p.second.b", 3),
        ("p.first.", 4),  # no field
        ("p.second.a", 5),  # repeated: the last value wins
        (None, 6),  # not a name at all
    ]
    decoded = decode(properties, "p.")
    assert decoded == {"second": {"a": 5, "b": 3}, "first": {"a": 2}}
    assert list(decoded) == ["second", "first"]
    assert decode([], "p.") == {}


def test_figures_read_back_after_becoming_strings():
    """JUnit XML and pytest-xdist may hand values back as text, as lists not tuples."""
    properties = encode("p.", "a.b", {"ms": 1 / 3, "n": 4, "v": "ok"})
    as_text = [[name, str(value)] for name, value in properties]
    decoded = decode(as_text, "p.")["a.b"]  # type: ignore[arg-type]
    assert decoded == {"ms": "0.333333", "n": "4", "v": "ok"}
    assert number(decoded["ms"]) == 0.333333
    assert number(decoded["n"]) == 4.0
    assert number(decoded["v"]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.5, 1.5), (3, 3.0), ("2.5", 2.5), (" 7 ", 7.0), ("-1e-3", -0.001), ("1e999", math.inf)],
)
def test_number_reads_numbers_and_numeric_text(value, expected):
    assert number(value) == expected


@pytest.mark.parametrize("value", [None, "", "abc", "1,5", True, False, [1], 10**400])
def test_number_is_none_for_anything_else(value):
    assert number(value) is None


def test_number_keeps_nan_as_nan():
    result = number("nan")
    assert result is not None and math.isnan(result)


def test_values_of_a_plain_property_in_order():
    properties = [("leak", "first"), ("p.k.leak", "record"), ("other", 1), ("leak", "second")]
    assert values_of(properties, "leak") == ["first", "second"]
    assert values_of(properties, "missing") == []
