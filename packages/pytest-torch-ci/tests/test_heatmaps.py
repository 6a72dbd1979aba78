"""Heatmaps of every kind of mismatch: valid PNGs with the figures in their titles."""

from __future__ import annotations

import matplotlib.image
import pytest
import torch

from pytest_torch.ci.heatmaps import compare, draw, panels, summarise

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def _case(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if name == "1-D":
        expected = torch.randn(50)
        actual = expected.clone()
        actual[7] += 3
    elif name == "2-D":
        expected = torch.randn(16, 24)
        actual = expected.clone()
        actual[3, 5] += 0.5
    elif name == "4-D":
        expected = torch.randn(2, 3, 8, 8)
        actual = expected.clone()
        actual[1, 2, 3, 3] += 1
    elif name == "large":
        expected = torch.randn(1000, 1000)
        actual = expected.clone()
        actual[123, 877] += 2
    elif name == "NaN":
        expected = torch.randn(5, 5)
        actual = expected.clone()
        actual[2, 3] = float("nan")
    elif name == "integer":
        expected = torch.arange(20).reshape(4, 5)
        actual = expected.clone()
        actual[2, 2] = 99
    else:  # complex
        expected = torch.randn(4, 4, dtype=torch.complex64)
        actual = expected.clone()
        actual[1, 1] += 1j
    return actual, expected


@pytest.mark.parametrize("name", ["1-D", "2-D", "4-D", "large", "NaN", "integer", "complex"])
def test_every_kind_draws_a_valid_png(tmp_path, name):
    actual, expected = _case(name)
    path = draw(actual, expected, tmp_path / "sub" / "map.png", name=name)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width == 1300 and height > 300


def test_summary_names_the_largest_difference_and_its_index():
    summary = summarise(compare(*_case("4-D"), None, None))
    assert (summary.mismatched, summary.total) == (1, 384)
    assert summary.largest == pytest.approx(1.0) and summary.where == (1, 2, 3, 3)
    nan = summarise(compare(*_case("NaN"), None, None))
    assert nan.mismatched == 1 and nan.non_finite == 1 and nan.largest is None


def test_shapes_become_panels_worst_slices_first_and_large_ones_pooled():
    shown, slices = panels(compare(*_case("4-D"), None, None))
    assert slices == 6 and [p.label for p in shown] == ["slice [1, 2, :, :]"]
    (folded,), _ = panels(compare(*_case("1-D"), None, None))
    assert folded.actual.shape == (7, 8) and int(folded.padding.sum()) == 6
    assert bool(folded.mismatched[0, 7])  # element 7: row 0, column 7
    (pooled,), _ = panels(compare(*_case("large"), None, None))
    assert pooled.pooled == 8 and pooled.actual.shape == (125, 125)
    assert int(pooled.mismatched.sum()) == 1 and bool(pooled.mismatched[123 // 8, 877 // 8])


def test_integer_and_complex_comparisons():
    integer = compare(*_case("integer"), None, None)
    assert int(integer.mismatched.sum()) == 1 and float(integer.difference.max()) == 87
    complex_ = compare(*_case("complex"), None, None)
    assert complex_.note == "complex: magnitudes shown" and bool(complex_.mismatched[1, 1])
