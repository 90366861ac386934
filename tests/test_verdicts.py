"""The verdict vocabulary: each of the six outcomes."""

import math

import pytest

from parity import verdicts as v


@pytest.mark.parametrize(
    ("worst", "expect", "verdict"),
    [
        (5e-7, "pass", v.PASS),
        (2e-6, "pass", v.FAIL),
        (9.8e-3, "fail", v.EXPECTED_FAIL),
        (5e-7, "fail", v.UNEXPECTED_PASS),
        (math.nan, "pass", v.FAIL),
        (math.nan, "fail", v.EXPECTED_FAIL),
        (math.inf, "pass", v.FAIL),  # a non-finite mismatch (closeness)
        (math.inf, "fail", v.EXPECTED_FAIL),
        (1e-6, "pass", v.PASS),  # the tolerance itself passes
    ],
)
def test_judge(worst, expect, verdict):
    assert v.judge(worst, 1e-6, expect) == verdict


def test_zero_tolerance_demands_exact_equality():
    assert v.judge(0.0, 0.0, "pass") == v.PASS
    assert v.judge(1e-300, 0.0, "pass") == v.FAIL


@pytest.mark.parametrize(
    ("verdict", "ok"),
    [
        (v.PASS, True),
        (v.EXPECTED_FAIL, True),
        (v.UNSUPPORTED, True),
        (v.FAIL, False),
        (v.UNEXPECTED_PASS, False),
        (v.ERROR, False),
    ],
)
def test_meets_expectation(verdict, ok):
    assert v.meets_expectation(verdict) is ok


def test_unknown_values_are_refused():
    with pytest.raises(ValueError, match="expect"):
        v.judge(0.0, 1.0, "maybe")
    with pytest.raises(ValueError, match="unknown verdict"):
        v.meets_expectation("fine")
