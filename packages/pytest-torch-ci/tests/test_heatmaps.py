"""Heatmaps of every kind of mismatch: valid PNGs with the figures in their titles."""

from __future__ import annotations

import warnings

import matplotlib.image
import pytest
import torch

from pytest_torch.ci.artifacts import Pair, sanitise, write
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
    assert complex_.note.startswith("complex: |actual| and |expected| shown")
    assert bool(complex_.mismatched[1, 1])


def test_a_complex_change_of_phase_alone_is_a_difference():
    expected = torch.ones(2, 2, dtype=torch.complex128)
    actual = expected.clone()
    actual[0, 1] = -1  # same magnitude, opposite phase
    comparison = compare(actual, expected, None, None)
    assert float(comparison.difference[0, 1]) == 2 and int(comparison.mismatched.sum()) == 1
    assert float(comparison.actual[0, 1]) == 1  # the panels show magnitudes


def test_booleans_become_a_mismatch_map():
    expected = torch.zeros(3, 3, dtype=torch.bool)
    actual = expected.clone()
    actual[2, 0] = True
    comparison = compare(actual, expected, None, None)
    assert comparison.note.startswith("bool: 1 is True, 0 is False")
    assert torch.equal(comparison.difference, comparison.mismatched.to(torch.float64))


def _layouts() -> dict[str, tuple[torch.Tensor, torch.Tensor, str | None]]:
    """actual, expected and the note expected instead of a picture (None: a picture)."""
    base = torch.arange(24.0).reshape(4, 6)
    changed = base.clone()
    changed[1, 2] += 5
    complex_base = torch.complex(base, base)
    quantized = [torch.quantize_per_tensor(t, 0.5, 0, torch.quint8) for t in (changed, base)]
    return {
        "strided": (changed, base, None),
        "sparse_coo": (changed.to_sparse(), base.to_sparse(), None),
        "sparse_csr": (changed.to_sparse_csr(), base.to_sparse_csr(), None),
        "sparse_csc": (changed.to_sparse_csc(), base.to_sparse_csc(), None),
        "sparse_bsr": (changed.to_sparse_bsr((2, 2)), base.to_sparse_bsr((2, 2)), None),
        "sparse vs strided": (changed.to_sparse(), base, None),
        "quantized": (*quantized, None),
        "meta": (
            torch.empty(4, 6, device="meta"),
            torch.empty(4, 6, device="meta"),
            "output: no heatmap for a meta tensor (it has a shape but no values); tensors saved",
        ),
        "nested": (
            torch.nested.nested_tensor([changed, base[:2]], layout=torch.jagged),
            torch.nested.nested_tensor([base, base[:2]], layout=torch.jagged),
            None,
        ),
        "nested of other shapes": (
            torch.nested.nested_tensor([changed, base[:2]], layout=torch.jagged),
            torch.nested.nested_tensor([base, base[:3]], layout=torch.jagged),
            "output: no heatmap: the components of the nested tensors differ in shape;"
            " tensors saved",
        ),
        "complex": (complex_base.conj(), complex_base, None),
        "bool": (changed > 7, base > 7, None),
        "bfloat16": (changed.bfloat16(), base.bfloat16(), None),
        "float8_e4m3fn": (changed.to(torch.float8_e4m3fn), base.to(torch.float8_e4m3fn), None),
        "0-d": (
            torch.tensor(1.0),
            torch.tensor(2.5),
            "output: no heatmap for a single value: actual 1, expected 2.5,"
            " |actual - expected| 1.5; tensors saved",
        ),
        "one element": (
            torch.tensor([[True]]),
            torch.tensor([[False]]),
            "output: no heatmap for a single value: actual True, expected False; tensors saved",
        ),
        "0-d complex": (
            torch.tensor(1 + 2j),
            torch.tensor(1 - 2j),
            "output: no heatmap for a single value: actual 1+2j, expected 1-2j,"
            " |actual - expected| 4; tensors saved",
        ),
        "empty": (
            torch.zeros(0, 3),
            torch.ones(0, 3),
            "output: no heatmap for an empty tensor (shape [0, 3]); tensors saved",
        ),
        "6-D": (torch.ones(2, 1, 2, 1, 3, 3), torch.zeros(2, 1, 2, 1, 3, 3), None),
        "non-contiguous": (changed.t()[::2], base.t()[::2], None),
        "negative view": (complex_base.conj().imag, (-complex_base).imag, None),
        "shapes differ": (
            torch.zeros(2, 3),
            torch.zeros(3, 2),
            "output: no heatmap: the shapes differ ([2, 3] vs [3, 2]); tensors saved",
        ),
        "integer": (changed.long(), base.long(), None),
    }


def _values(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.resolve_conj().resolve_neg()
    return tensor.to(torch.complex128 if tensor.is_complex() else torch.float64)


with warnings.catch_warnings():  # torch's beta/deprecation warnings on construction
    warnings.simplefilter("ignore")
    LAYOUTS = list(_layouts())


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_and_dtype_gets_its_tensors_saved_and_a_picture_or_a_note(tmp_path, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual, expected, note = _layouts()[name]
        written = write(tmp_path, f"test_x[{name}]", [Pair("output", actual, expected)])
        folder = tmp_path / sanitise(f"test_x[{name}]")
        saved = torch.load(folder / "1-output.pt", weights_only=False)
    pictures = sorted(p.name for p in folder.glob("*.png"))
    assert written.notes == ([note] if note else [])
    assert pictures == ([] if note else ["1-output.png"])
    assert saved["path"] == "output" and saved["actual"].dtype == actual.dtype
    assert saved["actual"].layout == actual.layout and saved["actual"].is_nested == actual.is_nested
    plain = actual.layout == torch.strided and not (actual.is_nested or actual.is_quantized)
    if plain and not actual.is_meta:
        assert torch.equal(_values(saved["actual"]), _values(actual))
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left


def test_views_save_only_their_own_elements(tmp_path):
    base = torch.zeros(1000, 1000)
    view = base[::100, ::100]
    write(tmp_path, "t", [Pair("output", view + 1, view)])
    saved = torch.load(tmp_path / "t" / "1-output.pt")
    assert saved["expected"].untyped_storage().nbytes() == 100 * 4


def test_what_cannot_be_drawn_or_saved_becomes_a_note(tmp_path, monkeypatch):
    from pytest_torch.ci import heatmaps

    monkeypatch.setattr(heatmaps, "MAX_ELEMENTS", 10)
    big = torch.eye(5).to_sparse()
    written = write(tmp_path, "t", [Pair("w", big * 2, big)])
    assert written.notes == [
        "w: no heatmap for a sparse_coo tensor of 25 elements (more than 10 to draw); tensors saved"
    ]

    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message for you")

    def broken(*args, **kwargs):
        raise Hostile

    monkeypatch.setattr(heatmaps, "draw", broken)
    monkeypatch.setattr(torch, "save", broken)
    written = write(tmp_path, "t", [Pair("w", torch.ones(2), torch.zeros(2))])
    assert written.paths == []
    assert written.notes == [
        "w: no heatmap (Hostile: (its message could not be read)); tensors not saved"
        " (Hostile: (its message could not be read))"
    ]
