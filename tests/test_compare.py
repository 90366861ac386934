"""The comparison maths on hand-made traces with known answers."""

import math

import numpy as np
import pytest

from parity.compare import maths as compare
from parity.compare.closeness import max_abs_diff
from parity.trace.reader import TraceReader

from conftest import write_trace


def test_max_abs_diff_reports_value_and_location_in_pytorch_layout():
    a = {"fc1.weight": np.zeros(6, np.float32), "fc1.bias": np.zeros(2, np.float32)}
    b = {"fc1.weight": np.zeros(6, np.float32), "fc1.bias": np.zeros(2, np.float32)}
    b["fc1.weight"][4] = 0.25
    b["fc1.bias"][1] = -0.5
    d = max_abs_diff(a, b, ["fc1.weight", "fc1.bias"])
    assert d.value == 0.5
    assert d.where == "fc1.bias[1]"


def test_ties_and_zeros_point_at_the_first_parameter_like_the_study():
    a = {"fc1.weight": np.ones(3, np.float32), "fc2.weight": np.ones(3, np.float32)}
    assert max_abs_diff(a, a, ["fc1.weight", "fc2.weight"]).where == "fc1.weight[0]"
    b = {
        "fc1.weight": np.array([1, 2, 1], np.float32),
        "fc2.weight": np.array([2, 1, 1], np.float32),
    }
    d = max_abs_diff(a, b, ["fc1.weight", "fc2.weight"])
    assert (d.value, d.where) == (1.0, "fc1.weight[1]")


def test_difference_of_f32_values_is_exact_in_f64():
    x = np.float32(1.0)
    y = np.nextafter(x, np.float32(2))  # one float32 ULP above 1
    d = max_abs_diff({"p": np.array([x])}, {"p": np.array([y])}, ["p"])
    assert d.value == 2.0**-23


def test_a_non_finite_difference_is_infinite_and_located():
    # closeness's rule: a NaN against a finite value counts +inf, at its first position.
    a = {"p": np.array([0.0, 1.0, 2.0])}
    b = {"p": np.array([5.0, np.nan, 2.0])}
    d = max_abs_diff(a, b, ["p"])
    assert d.value == math.inf and d.where == "p[1]"


def test_perstep_of_runs_that_diverged_alike_and_apart(tmp_path):
    # Both runs NaN at the same position count 0 there, as do equal losses of NaN; a NaN
    # against a finite value (parameter or loss) counts inf. The traces' own status says
    # that they diverged.
    w0 = [1.0, 2.0]
    ref = [{"w": w0}, {"w": [np.nan, 2.5]}, {"w": [np.nan, 3.0]}]
    cand = [{"w": w0}, {"w": [np.nan, 2.25]}, {"w": [4.0, 3.0]}]
    r = write_trace(tmp_path / "ref.parquet", ref, losses=[None, np.nan, np.nan])
    c = write_trace(tmp_path / "cand.parquet", cand, losses=[None, np.nan, 1.0], run="candle")
    rows = compare.perstep(TraceReader(r), TraceReader(c)).rows
    assert (rows[1]["max_dparam"], rows[1]["where"], rows[1]["dloss"]) == (0.25, "w[1]", 0.0)
    assert (rows[2]["max_dparam"], rows[2]["where"], rows[2]["dloss"]) == (
        math.inf,
        "w[0]",
        math.inf,
    )
    assert compare.worst(rows, "max_dparam") == (math.inf, 2)


def test_bitwise_equal_distinguishes_signed_zero():
    a = {"p": np.array([0.0], np.float32)}
    b = {"p": np.array([-0.0], np.float32)}
    assert not compare.bitwise_equal(a, b, ["p"])
    assert compare.bitwise_equal(a, a, ["p"])


def _pair(tmp_path, ref_steps, cand_steps, **kw):
    r = write_trace(tmp_path / "ref.parquet", ref_steps, **kw)
    c = write_trace(tmp_path / "cand.parquet", cand_steps, run="candle", framework="candle", **kw)
    return TraceReader(r), TraceReader(c)


def test_perstep_rows_losses_and_step0_check(tmp_path):
    w0 = np.array([1.0, 2.0, 3.0, 4.0])
    ref = [{"w": w0}, {"w": w0 + 0.5}, {"w": w0 + 1.0}]
    cand = [
        {"w": w0},
        {"w": w0 + np.array([0.5, 0.5, 0.75, 0.5])},
        {"w": w0 + np.array([1, 1, 1, 0.875])},
    ]
    r, c = _pair(tmp_path, ref, cand, losses=[None, 2.0, 1.5])
    out = compare.perstep(r, c)
    assert out.step0_identical
    assert [row["step"] for row in out.rows] == [0, 1, 2]
    assert out.rows[0]["loss_a"] is None and out.rows[0]["dloss"] is None
    assert out.rows[1]["max_dparam"] == 0.25 and out.rows[1]["where"] == "w[2]"
    assert out.rows[2]["max_dparam"] == 0.125 and out.rows[2]["where"] == "w[3]"
    assert out.rows[1]["dloss"] == 0.0


def test_step0_mismatch_is_reported(tmp_path):
    ref = [{"w": [1.0, 2.0]}, {"w": [1.0, 2.0]}]
    cand = [{"w": [1.0, 2.5]}, {"w": [1.0, 2.0]}]
    r, c = _pair(tmp_path, ref, cand)
    assert not compare.perstep(r, c).step0_identical


def test_split_columns_are_the_four_distances(tmp_path):
    w0 = np.array([0.0, 0.0])
    r32 = write_trace(tmp_path / "r32.parquet", [{"w": w0}, {"w": [1.0, 2.0]}])
    c32 = write_trace(tmp_path / "c32.parquet", [{"w": w0}, {"w": [1.0, 2.25]}], run="candle")
    r64 = write_trace(tmp_path / "r64.parquet", [{"w": w0}, {"w": [1.5, 2.0]}], dtype="f64")
    c64 = write_trace(
        tmp_path / "c64.parquet", [{"w": w0}, {"w": [1.5, 2.0625]}], dtype="f64", run="candle"
    )
    rows = compare.split(*(TraceReader(p) for p in (r32, c32, r64, c64)))
    assert rows[1] == {
        "step": 1,
        "max_dparam": 0.25,  # |r32 - c32|
        "torch_f64": 0.5,  # |r32 - r64|
        "candle_f64": 0.5,  # max(|1-1.5|, |2.25-2.0625|)
        "f64_f64": 0.0625,  # |r64 - c64|
    }
    assert rows[0]["f64_f64"] == 0.0


def test_traces_from_different_fixtures_are_refused(tmp_path):
    ref = [{"w": [1.0]}, {"w": [1.0]}]
    r = write_trace(tmp_path / "a.parquet", ref)
    c = write_trace(tmp_path / "b.parquet", ref, fixture_sha256="f" * 64)
    with pytest.raises(compare.ComparisonError, match="different fixtures"):
        compare.check_comparable([TraceReader(r), TraceReader(c)])


def test_traces_checked_against_the_current_fixture(tmp_path):
    ref = [{"w": [1.0]}, {"w": [1.0]}]
    r = write_trace(tmp_path / "a.parquet", ref)
    with pytest.raises(compare.ComparisonError, match="another fixture"):
        compare.check_comparable([TraceReader(r)], "e" * 64)


def test_traces_with_different_parameters_are_refused(tmp_path):
    r = write_trace(tmp_path / "a.parquet", [{"w": [1.0]}, {"w": [1.0]}])
    c = write_trace(tmp_path / "b.parquet", [{"v": [1.0]}, {"v": [1.0]}])
    with pytest.raises(compare.ComparisonError, match="different parameters"):
        compare.check_comparable([TraceReader(r), TraceReader(c)])


def test_worst_skips_none_and_reports_first_step():
    rows = [{"step": 0, "x": None}, {"step": 1, "x": 2.0}, {"step": 2, "x": 2.0}]
    assert compare.worst(rows, "x") == (2.0, 1)
    assert math.isnan(compare.worst([{"step": 1, "x": math.nan}], "x")[0])
    inf = [{"step": 1, "x": 1.0}, {"step": 2, "x": math.inf}, {"step": 3, "x": math.inf}]
    assert compare.worst(inf, "x") == (math.inf, 2)
