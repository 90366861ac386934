"""The verdict vocabulary and how a comparison's verdict is reached: each of the six
outcomes, through the one judging interface (parity.compare.judgement)."""

import math

import numpy as np
import pytest

from parity.compare import judgement
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
    j = judgement.judge_worst(worst, "fc1.weight[3]", 1e-6, expect)
    assert j.verdict == verdict
    assert (j.worst is worst or j.worst == worst) and j.where == "fc1.weight[3]"
    assert j.tolerance == 1e-6


def test_zero_tolerance_demands_exact_equality():
    assert judgement.judge_worst(0.0, "w[0]", 0.0, "pass").verdict == v.PASS
    assert judgement.judge_worst(1e-300, "w[0]", 0.0, "pass").verdict == v.FAIL


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
        judgement.judge_worst(0.0, "w[0]", 1.0, "maybe")
    with pytest.raises(ValueError, match="expect"):
        judgement.judge_check(True, "maybe")
    with pytest.raises(ValueError, match="unknown verdict"):
        v.meets_expectation("fine")


def test_check_verdict_of_a_yes_no_criterion():
    assert judgement.judge_check(True, "pass").verdict == v.PASS
    assert judgement.judge_check(False, "pass").verdict == v.FAIL
    assert judgement.judge_check(True, "fail").verdict == v.UNEXPECTED_PASS
    assert judgement.judge_check(False, "fail").verdict == v.EXPECTED_FAIL
    assert judgement.judge_check(False, message="bit for bit").message == "bit for bit"


def test_a_failing_comparison_says_where_and_by_how_much():
    j = judgement.judge_worst(2.5e-6, "fc1.weight[3]", 1e-6)
    assert j.message == (
        "greatest absolute difference: 2.5e-06 at fc1.weight[3] (up to 1e-06 allowed)"
    )
    assert judgement.judge_worst(5e-7, "fc1.weight[3]", 1e-6).message == ""
    assert not j.accepted and judgement.judge_worst(2.5e-6, "x", 1e-6, "fail").accepted


def test_judge_values_measures_holds_and_describes_once():
    ref = {"w": np.array([1.0, 2.0, 3.0]), "b": np.array([0.5])}
    ok = judgement.judge(ref, {"w": np.array([1.0, 2.0 + 1e-7, 3.0]), "b": ref["b"]}, 1e-6)
    assert (ok.verdict, ok.where, ok.message) == (v.PASS, "w[1]", "")
    assert ok.worst == pytest.approx(1e-7) and ok.tolerance == 1e-6
    bad = judgement.judge(ref, {"w": ref["w"], "b": np.array([math.nan])}, 1e-6)
    assert (bad.verdict, bad.worst, bad.where) == (v.FAIL, math.inf, "b[0]")
    assert bad.message == (
        "mismatched elements: 1 / 4 (25.0%), greatest absolute difference: inf at b[0] "
        "(up to 1e-06 allowed)"
    )
    with pytest.raises(ValueError):
        judgement.judge(ref, {"w": np.zeros(2), "b": ref["b"]}, 1e-6)


def test_expecting_turns_a_controls_fail_into_its_expected_verdict():
    failed = judgement.Judgement(v.FAIL, 1.0, "w[0]", 0.0, "why")
    assert judgement.expecting(failed, "fail") == judgement.Judgement(
        v.EXPECTED_FAIL, 1.0, "w[0]", 0.0, "why"
    )
    assert judgement.expecting(failed, "pass") is failed
