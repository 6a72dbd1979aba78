"""Unit tests of the tensor comparison engine."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_torch.core import Mismatch, TensorMismatchError, assert_close
from pytest_torch.core.compare import StructureMismatchError, default_tolerances

# these tests draw from the global random generators; torch_seed restores them
pytestmark = pytest.mark.usefixtures("torch_seed")


def _mismatch(actual, expected, **kwargs) -> TensorMismatchError:
    with pytest.raises(TensorMismatchError) as info:
        assert_close(actual, expected, **kwargs)
    return info.value


def test_equal_inputs_pass():
    x = torch.randn(3, 4)
    assert_close(x, x.clone())
    assert_close({"a": [x, 1.0]}, {"a": [x.clone(), 1.0]})
    assert_close(x, x + 1e-7)


def test_reports_count_share_and_largest_differences_with_indices():
    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[1, 2] = 0.5
    actual[3, 4] = -2.0
    actual[0, 0] = 0.25
    error = _mismatch(actual, expected)
    text = str(error)
    assert "mismatched elements: 3 of 20 (15%)" in text
    assert "greatest absolute difference: 2 at index (3, 4)" in text
    lines = text.splitlines()
    table_start = next(i for i, line in enumerate(lines) if "largest differences" in line)
    header, first, second, third = lines[table_start + 1 : table_start + 5]
    assert header.split() == ["index", "actual", "expected", "abs", "diff", "rel", "diff"]
    assert first.split()[:4] == ["(3,", "4)", "-2", "0"]
    assert second.split()[:2] == ["(1,", "2)"]
    assert third.split()[:2] == ["(0,", "0)"]
    assert "tolerances: rtol=1.3e-06, atol=1e-05" in text
    assert "pass looser rtol= and atol=" in text


def test_error_carries_tensors_and_figures():
    expected = torch.ones(10)
    actual = expected.clone()
    actual[7] = 3.0
    error = _mismatch(actual, expected)
    assert error.actual is actual
    assert error.expected is expected
    (mismatch,) = error.mismatches
    assert isinstance(mismatch, Mismatch)
    assert (mismatch.kind, mismatch.mismatched, mismatch.total) == ("values", 1, 10)
    assert mismatch.max_abs_diff == pytest.approx(2.0)
    assert mismatch.max_abs_index == (7,)
    assert (mismatch.rtol, mismatch.atol) == (1.3e-6, 1e-5)
    assert isinstance(error, AssertionError)


def test_max_report_bounds_the_table():
    actual = torch.arange(100.0)
    error = _mismatch(actual, torch.zeros(100), max_report=3)
    assert "largest differences (3 of 99 finite mismatches)" in str(error)


def test_nan_and_inf_disagreements_are_listed_by_position():
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    actual = expected.clone()
    actual[0, 1] = math.nan
    actual[1, 0] = math.inf
    text = str(_mismatch(actual, expected))
    assert "NaN/Inf disagreements (2):" in text
    nan_section = text.split("NaN/Inf disagreements (2):")[1]
    assert "(0, 1)" in nan_section and "nan" in nan_section
    assert "(1, 0)" in nan_section and "inf" in nan_section


def test_nan_in_both_needs_equal_nan():
    x = torch.tensor([1.0, math.nan])
    text = str(_mismatch(x, x.clone()))
    assert "pass equal_nan=True" in text
    assert_close(x, x.clone(), equal_nan=True)


def test_nested_outputs_name_the_path_and_report_every_mismatch():
    a = torch.zeros(3)
    b = torch.ones(3)
    error = _mismatch({"logits": a, "aux": [a, a]}, {"logits": a, "aux": [a, b]})
    assert [m.path for m in error.mismatches] == ["output['aux'][1]"]
    error = _mismatch((a, {"x": a}), (b, {"x": b}))
    assert [m.path for m in error.mismatches] == ["output[0]", "output[1]['x']"]
    assert "2 of 2 compared tensors differ." in str(error)


def test_structure_mismatch():
    a = torch.zeros(2)
    with pytest.raises(StructureMismatchError, match=r"Length differs at output: actual has 1"):
        assert_close([a], [a, a])
    with pytest.raises(StructureMismatchError, match=r"Keys differ at output\['m'\]"):
        assert_close({"m": {"x": a}}, {"m": {"y": a}})


def test_metadata_mismatch_keeps_torch_explanation():
    error = _mismatch(torch.zeros(2, 3), torch.zeros(3, 2))
    assert error.mismatches[0].kind == "shape"
    assert "Mismatch at output (shape)" in str(error)
    assert "shape" in str(error).lower()
    error = _mismatch(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert error.mismatches[0].kind == "dtype"
    assert_close(torch.zeros(2), torch.zeros(2, dtype=torch.float64), check_dtype=False)


def test_explicit_tolerances_are_used_and_shown():
    actual = torch.tensor([1.0, 2.0])
    expected = torch.tensor([1.0, 2.1])
    assert_close(actual, expected, rtol=0.0, atol=0.2)
    text = str(_mismatch(actual, expected, rtol=0.0, atol=0.01))
    assert "tolerances: rtol=0, atol=0.01" in text


def test_rtol_without_atol_is_rejected():
    with pytest.raises(ValueError, match="both rtol and atol or neither"):
        assert_close(torch.zeros(1), torch.zeros(1), rtol=0.1)


def test_integer_bool_and_complex_tensors():
    big = torch.tensor([2**60, 5], dtype=torch.int64)
    error = _mismatch(big, big + torch.tensor([1, 0]))
    assert "mismatched elements: 1 of 2" in str(error)
    assert "1152921504606846976" in str(error)
    error = _mismatch(torch.tensor([True, False]), torch.tensor([True, True]))
    assert "mismatched elements: 1 of 2" in str(error)
    c = torch.tensor([1 + 1j, 2 - 2j], dtype=torch.complex64)
    error = _mismatch(c, c + torch.tensor([0, 1j], dtype=torch.complex64))
    assert "index (1,)" in str(error)


def test_python_numbers_and_zero_dim():
    error = _mismatch(1.0, 1.5)
    assert "mismatched elements: 1 of 1" in str(error)
    assert "at index ()" in str(error)


def test_low_precision_default_tolerances():
    assert default_tolerances(torch.bfloat16) == (1.6e-2, 1e-5)
    assert default_tolerances(torch.float32, torch.float16) == (1e-3, 1e-5)
    assert default_tolerances(torch.int64) == (0.0, 0.0)
    x = torch.tensor([1.0], dtype=torch.bfloat16)
    assert_close(x, x * 1.0078125)  # one bf16 ulp is within its default rtol


def test_user_message_goes_first():
    text = str(_mismatch(torch.zeros(1), torch.ones(1), msg="logits after the fix"))
    assert text.splitlines()[0] == "logits after the fix"


def test_add_detail_appends_a_line():
    error = _mismatch(torch.zeros(1), torch.ones(1))
    error.add_detail("heatmap: artifacts/x.png")
    assert str(error).endswith("\nheatmap: artifacts/x.png")


def test_hint_depends_on_what_differs():
    nan_only = str(_mismatch(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0])))
    assert "Only NaN/Inf values disagree" in nan_only
    assert "pass looser rtol=" not in nan_only
    values = str(_mismatch(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 2.0])))
    assert "pass looser rtol= and atol=" in values
    shape = str(_mismatch(torch.zeros(2), torch.zeros(3)))
    assert "rtol=" not in shape.split("\n")[-1]


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_sparse_and_quantized_tensors_get_figures_too():
    dense = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    error = _mismatch(
        dense.to_sparse(), (dense + torch.tensor([[0.0, 0.0], [0.5, 0.0]])).to_sparse()
    )
    assert error.mismatches[0].kind == "values"
    assert "index (1, 0)" in str(error)
    q = torch.quantize_per_tensor(dense, scale=0.5, zero_point=0, dtype=torch.quint8)
    q2 = torch.quantize_per_tensor(dense + 1, scale=0.5, zero_point=0, dtype=torch.quint8)
    error = _mismatch(q, q2)
    assert "mismatched elements: 4 of 4" in str(error)


def test_none_against_a_tensor_is_a_type_mismatch():
    error = _mismatch(torch.ones(2), None)
    assert error.mismatches[0].kind == "type"
    assert "None" in str(error)
