"""The closeness rule: the difference with NaN and Inf, the tolerance, the scaling and the
mismatch message (``parity.compare.closeness``)."""

import math

import numpy as np
import pytest

from parity.compare import closeness
from parity.compare.closeness import abs_diff, max_abs_diff, mismatch, scaled_tolerance, within

NAN, INF = math.nan, math.inf


def diff(x, y):
    return max_abs_diff({"p": np.array(x, np.float64)}, {"p": np.array(y, np.float64)}, ["p"])


def test_finite_values_give_their_largest_difference_and_its_first_position():
    d = diff([1.0, 3.5, 0.0, 3.5], [1.0, 2.0, 0.0, 5.0])
    assert (d.value, d.where) == (1.5, "p[1]")


def test_nan_on_both_sides_at_the_same_position_counts_zero():
    d = diff([1.0, NAN, 2.0], [1.0, NAN, 2.5])
    assert (d.value, d.where) == (0.5, "p[2]")
    assert diff([NAN, NAN], [NAN, NAN]).value == 0.0


def test_nan_against_a_finite_value_counts_infinite_at_its_first_position():
    d = diff([0.0, 1.0, NAN, NAN], [5.0, NAN, 2.0, 3.0])
    assert (d.value, d.where) == (INF, "p[1]")
    assert diff([NAN], [INF]).value == INF


def test_equal_infinities_count_zero_and_others_infinite():
    assert diff([INF, -INF, 1.0], [INF, -INF, 1.0]).value == 0.0
    assert diff([INF, 1.0], [INF, 1.25]).value == 0.25
    d = diff([1.0, 1.0, INF], [1.0, -INF, 0.0])
    assert (d.value, d.where) == (INF, "p[1]")
    assert diff([INF], [-INF]).value == INF
    assert diff([-INF], [3.0]).value == INF


def test_no_difference_is_ever_nan():
    vals = [0.0, 1.0, -2.0, NAN, INF, -INF]
    for x in vals:
        for y in vals:
            v = diff([x], [y]).value
            assert not math.isnan(v), (x, y)
            assert (v == 0.0) == (x == y or (math.isnan(x) and math.isnan(y))), (x, y, v)


def test_the_first_infinite_difference_over_names_wins():
    a = {"a": np.array([1.0, 5.0]), "b": np.array([NAN, 0.0]), "c": np.array([INF])}
    b = {"a": np.array([1.0, 1.0]), "b": np.array([0.0, 0.0]), "c": np.array([0.0])}
    d = max_abs_diff(a, b, ["a", "b", "c"])
    assert (d.value, d.where) == (INF, "b[0]")
    assert max_abs_diff(a, b, ["c", "b"]).where == "c[0]"


def test_mixed_dtypes_are_compared_in_float64():
    x = np.array([1.0, NAN, INF], np.float32)
    y = np.array([1.0 + 2.0**-30, NAN, INF], np.float64)
    d = max_abs_diff({"p": x}, {"p": y}, ["p"])
    assert (d.value, d.where) == (2.0**-30, "p[0]")


def test_empty_arrays_count_zero_and_point_at_the_first_name():
    e = np.array([], np.float32)
    d = max_abs_diff({"p": e, "q": e}, {"p": e, "q": e}, ["p", "q"])
    assert (d.value, d.where) == (0.0, "p[0]")


def test_size_mismatch_is_refused_naming_the_tensor():
    with pytest.raises(ValueError, match=r"^w: 1 values against 2"):
        max_abs_diff({"w": np.array([1.0])}, {"w": np.array([1.0, 2.0])}, ["w"])


def test_arrays_are_read_flat_in_pytorch_layout():
    a = np.zeros((3, 4))
    b = a.copy()
    b[1, 2] = 0.5
    assert max_abs_diff({"w": a}, {"w": b}, ["w"]).where == "w[6]"


def test_scalar_difference_follows_the_same_rule():
    assert abs_diff(2.0, 1.5) == 0.5
    assert abs_diff(NAN, NAN) == 0.0
    assert abs_diff(NAN, 1.0) == INF
    assert abs_diff(INF, INF) == 0.0
    assert abs_diff(INF, -INF) == INF


@pytest.mark.parametrize(
    ("d", "tol", "ok"),
    [
        (0.0, 0.0, True),
        (1e-300, 0.0, False),
        (1e-6, 1e-6, True),  # the tolerance itself is within
        (1.1e-6, 1e-6, False),
        (NAN, 1e-6, False),
        (NAN, INF, False),
        (INF, 1e-6, False),
        (INF, INF, False),  # a non-finite mismatch exceeds every tolerance
        (1e300, INF, True),
    ],
)
def test_within(d, tol, ok):
    assert within(d, tol) is ok
    assert within(np.float64(d), tol) is ok


def test_tolerance_scales_with_the_largest_finite_reference_magnitude():
    assert scaled_tolerance(1e-6, np.array([0.1, -0.2])) == 1e-6  # at least magnitude 1
    assert scaled_tolerance(1e-6, np.array([3000.0, INF])) == pytest.approx(3e-3)
    assert scaled_tolerance(1e-6, np.array([-3000.0, NAN])) == pytest.approx(3e-3)
    assert scaled_tolerance(1e-6, np.array([NAN, -INF])) == 1e-6
    assert scaled_tolerance(1e-6, np.array([])) == 1e-6
    assert scaled_tolerance(0.0, np.array([340.0])) == 0.0


def test_mismatch_counts_elements_beyond_the_tolerance():
    a = {"w.grad": np.array([340.0, 392, 444, 484, 568, 652])}
    b = {"w.grad": np.array([220.0, 392, 444, 508, 580, 500])}
    m = mismatch(a, b, ["w.grad"], 30.0)
    assert (m.mismatched, m.total, m.worst.value, m.worst.where) == (2, 6, 152.0, "w.grad[5]")
    assert m.message == (
        "mismatched elements: 2 / 6 (33.3%), greatest absolute difference: 152 at "
        "w.grad[5] (up to 30 allowed)"
    )


def test_mismatch_message_over_several_tensors_with_non_finite_values():
    a = {"x": np.array([1.0, NAN]), "y": np.array([INF, 2.0, 3.0])}
    b = {"x": np.array([1.0, NAN]), "y": np.array([INF, 2.5, NAN])}
    assert closeness.mismatch_message(a, b, ["x", "y"], 1e-6) == (
        "mismatched elements: 2 / 5 (40.0%), greatest absolute difference: inf at y[2] "
        "(up to 1e-06 allowed)"
    )
    same = closeness.mismatch(a, a, ["x", "y"], 0.0)
    assert (same.mismatched, same.total, same.worst.value) == (0, 5, 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_the_blocked_maximum_is_the_whole_arrays_maximum(seed, monkeypatch):
    """max_abs_diff works a block at a time; its value and first position are those of the
    whole-array differences, across block edges, ties and non-finite values."""
    monkeypatch.setattr(closeness, "BLOCK", 7)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    x = rng.integers(-3, 4, n).astype(np.float32)  # small integers: many ties
    y = rng.integers(-3, 4, n).astype(np.float64)
    for _ in range(int(rng.integers(0, 4))):
        x[rng.integers(n)] = rng.choice([NAN, INF, -INF])
        y[rng.integers(n)] = rng.choice([NAN, INF, -INF])
    whole, i = closeness._differences(x, y)
    got = max_abs_diff({"p": x}, {"p": y}, ["p"])
    assert (got.value, got.index) == (float(whole[i]), i)
