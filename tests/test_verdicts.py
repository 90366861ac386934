"""The verdict vocabulary: each of the six outcomes."""

import math

import pytest

from parity.compare import verdicts as v


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
def test_tolerance_verdict(worst, expect, verdict):
    assert v.tolerance_verdict(worst, 1e-6, expect) == verdict


def test_zero_tolerance_demands_exact_equality():
    assert v.tolerance_verdict(0.0, 0.0, "pass") == v.PASS
    assert v.tolerance_verdict(1e-300, 0.0, "pass") == v.FAIL


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
        v.tolerance_verdict(0.0, 1.0, "maybe")
    with pytest.raises(ValueError, match="unknown verdict"):
        v.meets_expectation("fine")


def test_check_verdict_of_a_yes_no_criterion():
    assert v.check_verdict(True, "pass") == v.PASS
    assert v.check_verdict(False, "pass") == v.FAIL
    assert v.check_verdict(True, "fail") == v.UNEXPECTED_PASS
    assert v.check_verdict(False, "fail") == v.EXPECTED_FAIL


@pytest.mark.parametrize(
    ("worst", "bug", "non_finite", "verdict"),
    [
        (0.0, None, False, v.PASS),
        (0.0, 5.0, False, v.KNOWN_BUG_FIXED),
        (5.0, 0.0, False, v.KNOWN_BUG),
        (5.0, 5.0, False, v.FAIL),
        (math.inf, None, True, v.NON_FINITE),
        (math.inf, 0.0, True, v.KNOWN_BUG),  # the known bug's own NaN/Inf, reproduced
        (math.nan, None, False, v.FAIL),  # values of another size
    ],
)
def test_probe_verdict(worst, bug, non_finite, verdict):
    assert v.probe_verdict(worst, 1e-6, known_bug_worst=bug, non_finite=non_finite) == verdict


@pytest.mark.parametrize(
    ("worst", "bug", "fp64_pass", "invalid", "verdict"),
    [
        (5.0, None, True, False, v.PASS),  # the float64-referenced rule passes it
        (5.0, None, False, False, v.FAIL),
        (5.0, 5.0, True, False, v.KNOWN_BUG_FIXED),
        (0.0, None, False, True, v.FAIL),  # equal values in another shape
        (0.0, None, True, True, v.FAIL),  # no rule passes a shape that differs
        (0.0, 0.0, False, True, v.KNOWN_BUG),  # a recorded bug of that shape
        (math.inf, None, True, False, v.PASS),  # only the rule decides then
    ],
)
def test_probe_verdict_with_the_fp64_rule_and_invalid_values(
    worst, bug, fp64_pass, invalid, verdict
):
    got = v.probe_verdict(worst, 1e-6, known_bug_worst=bug, fp64_pass=fp64_pass, invalid=invalid)
    assert got == verdict
