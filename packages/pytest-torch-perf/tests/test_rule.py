"""Unit tests of the regression rule: limits, "improved", tolerances and their defaults."""

from __future__ import annotations

import inspect
import math

import pytest

from pytest_torch.perf import rule
from pytest_torch.perf.rule import judge
from pytest_torch.perf.suites import cases as suites


@pytest.mark.parametrize(
    ("new", "regressed"),
    [(1.0, False), (0.2, False), (1.39, False), (1.4, False), (1.41, True), (3.0, True)],
)
def test_regression_rule(new, regressed):
    # limit = 1.0 * (1 + 0.3) + 0.1 = 1.4
    verdict = judge(new, 1.0, 0.3, 0.1)
    assert verdict.regressed is regressed
    assert verdict.limit == pytest.approx(1.4)
    assert verdict.ratio == pytest.approx(new)


def test_faster_is_never_a_regression():
    assert not judge(0.0, 5.0, 0.0, 0.0).regressed
    assert judge(0.5, 1.0, 0.3, 0.0).change == pytest.approx(-0.5)


def test_a_zero_baseline():
    assert judge(0.0, 0.0, 0.3, 0.0).ratio == 1.0
    assert judge(1.0, 0.0, 0.3, 0.0).ratio == math.inf


@pytest.mark.parametrize(("new", "improved"), [(0.69, True), (0.71, False), (1.0, False)])
def test_improved_is_faster_by_more_than_the_tolerance(new, improved):
    assert rule.improved(judge(new, 1.0, 0.3, 0.0), 0.3) is improved


def test_limit_texts():
    verdict = judge(2.2, 1.0, 0.3, 0.1)
    assert rule.latency_limit_text(verdict, 0.3, 0.1) == (
        "limit 1.4 ms = baseline x (1 + tolerance 0.3) + slack 0.1 ms"
    )
    memory = judge(100 * 2**20, 100 * 2**20, 0.1, rule.MEMORY_SLACK_BYTES)
    assert rule.memory_limit_text(memory, 0.1) == "limit 111.0 MiB = baseline x (1 + 0.1) + 1 MiB"


@pytest.mark.parametrize("value", [0, 0.0, 0.3, 2])
def test_valid_tolerances(value):
    assert rule.tolerance_problem("latency_tolerance", value) is None


@pytest.mark.parametrize("value", [-0.1, math.inf, math.nan, True, "0.3", None])
def test_invalid_tolerances_say_what_is_expected(value):
    assert rule.tolerance_problem("latency_tolerance", value) == (
        f"latency_tolerance must be a finite number >= 0, got {value!r}"
    )


def test_one_default_tolerance_everywhere():
    assert rule.DEFAULT_LATENCY_TOLERANCE == 0.3
    assert rule.TOLERANCE_HINT == "(0.3 allows 30 % more than the baseline)"
    assert suites.SuiteSpec((1,)).latency_tolerance == rule.DEFAULT_LATENCY_TOLERANCE
    default = inspect.signature(suites.benchmark_suite).parameters["latency_tolerance"].default
    assert default == rule.DEFAULT_LATENCY_TOLERANCE
