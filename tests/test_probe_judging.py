"""Probe language v2, judging: shapes, integer quantities, expected errors, per-case
tolerances, half precision and the float64-referenced rule; the probe plan's dtypes and
its float64 reference; the table's new columns. No frameworks run (PyTorch only computes
the false-alarm case's reference values)."""

import copy
import logging
import math

import numpy as np
import pytest
import torch

from parity.compare import closeness, verdicts
from parity.core import devices
from parity.plan import frameworks
from parity.probe import format as probes
from parity.probe.format import Probe
from parity.probe.fp64 import fp64_check, ulp
from parity.probe.judge import (
    integer_quantity,
    judge_probe_row,
    match_known_bug,
    same_shape,
    value_verdict,
)
from parity.probe.plan import FP64_RULE_DEFAULTS, ProbeKey, ProbePlan
from parity.probe.results import Outcome
from parity.probe.table import table_rows, write_table
from parity.render.tables import PROBE_COLUMNS

from conftest import REPO, load_config

# ----- normalized probes built by hand (the judging reads only the normalized form) --------


def _case(name, compare, steps=(), **over):
    case = {
        "name": name,
        "note": "",
        "steps": list(steps),
        "loss": None,
        "optimizer": None,
        "optimizer_steps": 1,
        "compare": list(compare),
        "exact": {},
        "known_bug": {},
        "expect": "values",
    }
    case.update(over)
    return case


def _probe(cases, tolerance=None, inputs=None, name="p"):
    tol = {"f32": 0.0, "f64": 0.0, "f16": 0.0, "bf16": 0.0, **(tolerance or {})}
    spec = {
        "probe": name,
        "description": "hand-made",
        "tolerance": tol,
        "inputs": inputs
        or [{"name": "x", "dtype": "float", "shape": [2], "values": [1, 2], "requires_grad": True}],
        "cases": cases,
    }
    return Probe(name, spec)


def _key(framework="candle", dtype="f32", device="cpu", probe="p"):
    return ProbeKey(probe, framework, dtype, device)


def ok(values, shape, case="c", quantity="y"):
    return Outcome.ok(case, quantity, values, shape)


# ----- the false alarm: burn's x.grad of softmax over x.T -------------------------------------


def _softmax_transpose_grad(dtype):
    """x.grad of loss = sum(softmax(x.T, -1) · c), x = 1..12 as [3, 4], c = 1..12 as [4, 3]."""
    x = torch.arange(1, 13, dtype=dtype).reshape(3, 4).requires_grad_()
    c = torch.arange(1, 13, dtype=dtype).reshape(4, 3)
    y = torch.softmax(x.transpose(0, 1), dim=-1)
    (y * c).sum().backward()
    return x.grad.double().numpy().reshape(-1)


SOFTMAX_T = _probe(
    [
        _case(
            "softmax_t",
            ["x.grad"],
            steps=[
                {"out": "xt", "inputs": ["x"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
                {"out": "y", "inputs": ["xt"], "op": {"name": "softmax", "dim": -1}},
            ],
            loss=[{"kind": "weighted_sum", "input": "y", "weights": "c"}],
        )
    ],
    # The repository's float32 tolerance: about 8 ulps of the largest value, at least 1.
    tolerance={"f32": 1e-6, "f64": 1e-12},
    inputs=[
        {
            "name": "x",
            "dtype": "float",
            "shape": [3, 4],
            "values": list(range(1, 13)),
            "requires_grad": True,
        },
        {"name": "c", "dtype": "float", "shape": [4, 3], "values": list(range(1, 13))},
    ],
    name="softmax_t",
)


@pytest.fixture(scope="module")
def softmax_grads():
    return _softmax_transpose_grad(torch.float32), _softmax_transpose_grad(torch.float64)


def _judge_softmax(candidate, g32, g64, with_reference64=True, rule=None):
    key = _key("burn", probe="softmax_t")
    outcome = Outcome.ok("softmax_t", "x.grad", candidate, (3, 4))
    reference = Outcome.ok("softmax_t", "x.grad", g32, (3, 4))
    reference64 = Outcome.ok("softmax_t", "x.grad", g64, (3, 4)) if with_reference64 else None
    return judge_probe_row(SOFTMAX_T, key, outcome, reference, reference64, rule)


def test_the_false_alarm_passes_by_the_float64_referenced_rule(softmax_grads):
    g32, g64 = softmax_grads
    torch_err = np.abs(g32 - g64).max()
    # PyTorch float32's own error against float64: 6.25e-07 (torch 2.15, this machine).
    assert 5.5e-7 < torch_err < 7e-7
    # A candidate as burn's: 0.78 of torch's error, on the other side of the float64 value,
    # rounded to float32: its error is about 4.9e-07, but it is about 1.11e-06 from torch
    # float32, beyond the tolerance 1e-06.
    candidate = (g64 - 0.78 * (g32 - g64)).astype(np.float32).astype(np.float64)
    cand_err = np.abs(candidate - g64).max()
    assert 4.6e-7 < cand_err < 5.2e-7
    assert np.abs(candidate - g32).max() > 1e-6
    # The tolerance alone (v1) calls it a failure: the false alarm.
    v1 = _judge_softmax(candidate, g32, g64, with_reference64=False)
    assert v1.verdict == verdicts.FAIL
    j = _judge_softmax(candidate, g32, g64)
    assert j.verdict == verdicts.PASS
    assert j.fp64.passed and j.fp64.multiplier == 3.0  # 12 elements: "auto" is 3
    assert j.fp64.fp64_diff == pytest.approx(cand_err)
    assert j.fp64.reference_fp64_diff == pytest.approx(torch_err)
    assert j.fp64.floor == 2.0**-23  # one float32 ulp at magnitude 1 (|x.grad| < 0.02)
    assert j.message.startswith(
        "passed by the float64-referenced rule: max|burn f32 cpu − torch f64 cpu| = 4.87e-07 "
        "≤ 3 × max|torch f32 cpu − torch f64 cpu| (6.25e-07) + 1.19e-07; beyond the "
        "tolerance: mismatched elements: 2 / 12 (16.7%), greatest absolute difference: "
        "1.112e-06"
    )
    assert j.reference64_values.tolist() == g64.tolist()
    # The float64 value rounded to float32 is off torch float32 by its 6.3e-07 only:
    # within the tolerance, and the note still gives both errors.
    rounded = g64.astype(np.float32).astype(np.float64)
    assert np.abs(rounded - g64).max() < 1e-9
    j = _judge_softmax(rounded, g32, g64)
    assert j.verdict == verdicts.PASS and j.message.startswith("passed by the tolerance")


def test_a_real_difference_fails_both_rules(softmax_grads):
    g32, g64 = softmax_grads
    candidate = g32.copy()
    candidate[5] += 1e-4
    j = _judge_softmax(candidate, g32, g64)
    assert j.verdict == verdicts.FAIL and not j.fp64.passed
    assert j.message.startswith("mismatched elements: 1 / 12")
    assert "the float64-referenced rule fails too" in j.message


def test_fp64_rule_settings_reach_the_judgement(softmax_grads):
    g32, g64 = softmax_grads
    candidate = (g64 - 0.78 * (g32 - g64)).astype(np.float32).astype(np.float64)
    # Multiplier 0 and no floor: only the float64 value itself would pass.
    j = _judge_softmax(candidate, g32, g64, rule={"multiplier": 0.5, "floor_ulps": 0})
    assert j.verdict == verdicts.FAIL and j.fp64.multiplier == 0.5 and j.fp64.floor == 0.0
    j = _judge_softmax(candidate, g32, g64, rule={"multiplier": 1, "floor_ulps": 0})
    assert j.verdict == verdicts.PASS


# ----- shapes ---------------------------------------------------------------------------------


def test_same_shape_counts_a_scalar_as_one_element():
    assert same_shape((), (1,)) and same_shape([1], ())
    assert same_shape((2, 3), [2, 3])
    assert not same_shape((2, 3), (3, 2)) and not same_shape((6,), (2, 3))
    assert not same_shape((), (1, 1))


def test_a_shape_other_than_the_reference_run_fails():
    probe = _probe([_case("c", ["y"])], tolerance={"f32": 1e-3})
    values = [1, 2, 3, 4, 5, 6]
    j = judge_probe_row(probe, _key(), ok(values, (2, 3)), ok(values, (3, 2)))
    assert j.verdict == verdicts.FAIL and j.worst == 0.0
    assert j.message == "shape [2, 3] where the reference has [3, 2]"
    assert j.reference_shape == (3, 2)
    # A scalar loss: PyTorch's [] equals burn's [1].
    j = judge_probe_row(probe, _key("burn"), ok([2.5], (1,)), ok([2.5], ()))
    assert (j.verdict, j.message) == (verdicts.PASS, "")


def test_exact_values_compare_count_and_nesting_shape():
    values = [1, 2, 3, 4, 5, 6]
    nested = {"values": values, "shape": [3, 2]}  # written [[1, 2], [3, 4], [5, 6]]
    probe = _probe([_case("c", ["y"], exact={"y": nested})])
    j = judge_probe_row(probe, _key(), ok(values, (2, 3)), None)
    assert j.verdict == verdicts.FAIL and "shape [2, 3] where the reference has [3, 2]" in j.message
    assert judge_probe_row(probe, _key(), ok(values, (3, 2)), None).verdict == verdicts.PASS
    # A flat list: only the element count counts.
    probe = _probe([_case("c", ["y"], exact={"y": {"values": values}})])
    assert judge_probe_row(probe, _key(), ok(values, (2, 3)), None).verdict == verdicts.PASS
    j = judge_probe_row(probe, _key(), ok(values[:4], (4,)), None)
    assert j.verdict == verdicts.FAIL and j.message == "4 values where the reference has 6"
    # A fill fits any shape.
    probe = _probe([_case("c", ["y"], exact={"y": {"fill": 1.0}})])
    assert judge_probe_row(probe, _key(), ok([1] * 6, (2, 3)), None).verdict == verdicts.PASS


# ----- integer quantities ------------------------------------------------------------------------


ARGMAX = _case(
    "c",
    ["i", "it", "x.grad", "y"],
    steps=[
        {"out": "i", "inputs": ["x"], "op": {"name": "argmax", "dim": 0, "keepdim": False}},
        {"out": "it", "inputs": ["k"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
        {"out": "y", "inputs": ["x"], "op": {"name": "relu"}},
    ],
)
INT_INPUTS = [
    {"name": "x", "dtype": "float", "shape": [2, 2], "values": [1, 2, 3, 4], "requires_grad": True},
    {"name": "k", "dtype": "int64", "shape": [2, 1], "values": [0, 1], "requires_grad": False},
]


def test_integer_quantities_are_the_integer_ops_and_int64_inputs():
    probe = _probe([ARGMAX], inputs=INT_INPUTS)
    assert integer_quantity(probe, ARGMAX, "i")
    assert integer_quantity(probe, ARGMAX, "it")  # an int64 input, transposed
    assert not integer_quantity(probe, ARGMAX, "y")
    assert not integer_quantity(probe, ARGMAX, "x.grad")
    assert not integer_quantity(probe, ARGMAX, "loss")


def test_integer_quantities_are_compared_exactly():
    # A float tolerance that would let an index off by one pass.
    probe = _probe([ARGMAX], tolerance={"f32": 1.0}, inputs=INT_INPUTS)
    right, wrong = ok([1, 1], (2,), quantity="i"), ok([1, 0], (2,), quantity="i")
    j = judge_probe_row(probe, _key(), wrong, right)
    assert (j.verdict, j.tolerance) == (verdicts.FAIL, 0.0)
    j = judge_probe_row(probe, _key(), right, right)
    assert (j.verdict, j.tolerance, j.fp64) == (verdicts.PASS, 0.0, None)
    # A float quantity of the same case keeps the tolerance.
    y, y_off = ok([1, 2, 3, 4], (2, 2)), ok([1, 2, 3, 4.5], (2, 2))
    assert judge_probe_row(probe, _key(), y_off, y).verdict == verdicts.PASS
    # Non-integers where integers belong fail even when equal.
    frac = ok([0.5, 1], (2,), quantity="i")
    j = judge_probe_row(probe, _key(), frac, frac)
    assert j.verdict == verdicts.FAIL and "not integers" in j.message


# ----- expect: error ---------------------------------------------------------------------------


ERROR_CASE = _probe([_case("c", ["y"], expect="error")])


def test_an_expected_error_passes_with_the_frameworks_message():
    err = Outcome.error("c", "y", "shape mismatch: [2] vs [3]")
    j = judge_probe_row(ERROR_CASE, _key(), err, None)
    assert j.verdict == verdicts.PASS
    assert j.message == "error as expected: shape mismatch: [2] vs [3]"
    # The reference refusing the case is what the case expects, not a missing reference;
    # PyTorch's own rows pass on its error too.
    torch_err = Outcome.error("c", "y", "RuntimeError: The size of tensor a")
    assert judge_probe_row(ERROR_CASE, _key(), err, torch_err).verdict == verdicts.PASS
    for dtype in ("f32", "f64", "f16"):
        j = judge_probe_row(ERROR_CASE, _key("torch", dtype), torch_err, None)
        assert j.verdict == verdicts.PASS


def test_values_where_an_error_is_expected_fail():
    j = judge_probe_row(ERROR_CASE, _key("burn"), ok([1, 2, 3], (3,)), None)
    assert (j.verdict, j.message) == (verdicts.FAIL, "returned values where an error is expected")
    # PyTorch itself must refuse it too.
    j = judge_probe_row(ERROR_CASE, _key("torch"), ok([1, 2, 3], (3,)), None)
    assert j.verdict == verdicts.FAIL
    # An API that lacks the op stays unsupported.
    j = judge_probe_row(ERROR_CASE, _key("burn"), Outcome.unsupported("c", "y", "no op"), None)
    assert j.verdict == verdicts.UNSUPPORTED
    # A recorded bug that returns values (e.g. broadcasting silently) is reproduced.
    bug = {"burn": {"cpu": {"y": {"values": [1, 2, 3]}}}}
    probe = _probe([_case("c", ["y"], expect="error", known_bug=bug)])
    j = judge_probe_row(probe, _key("burn"), ok([1, 2, 3], (3,)), None)
    assert j.verdict == verdicts.KNOWN_BUG
    j = judge_probe_row(probe, _key("burn"), Outcome.error("c", "y", "refused"), None)
    assert j.verdict == verdicts.KNOWN_BUG_FIXED


# ----- per-case tolerance ------------------------------------------------------------------------


def test_a_case_tolerance_overrides_the_files_per_dtype():
    loose = _case("loose", ["y"], tolerance={"f32": 1e-3})
    f16_only = _case("f16_only", ["y"], tolerance={"f16": 1e-1})
    plain = _case("plain", ["y"])
    probe = _probe([loose, f16_only, plain], tolerance={"f32": 1e-6, "f16": 1e-3})
    ref, off = [1.0, 2.0], [1.0, 2.0 + 1e-4]
    for case, dtype, verdict, tol in [
        ("loose", "f32", verdicts.PASS, 2e-3),
        ("plain", "f32", verdicts.FAIL, 2e-6),
        ("f16_only", "f32", verdicts.FAIL, 2e-6),  # the file's f32 tolerance
        ("f16_only", "f16", verdicts.PASS, 2e-1),
        ("plain", "f16", verdicts.PASS, 2e-3),
    ]:
        j = judge_probe_row(
            probe,
            _key(dtype=dtype),
            ok(off, (2,), case=case),
            ok(ref, (2,), case=case),
        )
        assert (j.verdict, j.tolerance) == (verdict, pytest.approx(tol)), (case, dtype)


# ----- half precision and the float64 rule ------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_ulp_is_the_spacing_of_the_run_dtype(dtype):
    np_dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}.get(dtype)
    for m in (1.0, 1.5, 2.0, 3.0, 1000.0, 0.5 + 2**10):
        if np_dtype is not None:
            assert ulp(dtype, m) == float(np.spacing(np_dtype(m)))
    if dtype == "bf16":
        assert ulp("bf16", 1.0) == 2.0**-7 and ulp("bf16", 3.0) == 2.0**-6


@pytest.mark.parametrize(("dtype", "bits"), [("f16", 10), ("bf16", 7)])
def test_half_precision_rows_pass_by_the_float64_rule(dtype, bits):
    probe = _probe([_case("c", ["y"])])  # tolerance 0: exact against torch in the dtype
    one = 2.0**-bits  # one ulp at 1
    ref64 = [1.0, 2.0]
    torch_dt = [1.0 + one, 2.0]  # PyTorch in the dtype: one ulp off at 1
    cand = [1.0, 2.0 + 2 * one]  # one ulp at 2: 2·one
    key = _key("candle", dtype)
    j = judge_probe_row(probe, key, ok(cand, (2,)), ok(torch_dt, (2,)), ok(ref64, (2,)))
    # 2·one ≤ 3 × one + floor (one ulp at 2: 2·one).
    assert j.verdict == verdicts.PASS, j.message
    assert j.fp64.floor == 2 * one and j.fp64.reference_fp64_diff == one
    assert f"passed by the float64-referenced rule: max|candle {dtype} cpu − torch f64 cpu|" in (
        j.message
    )
    # Off by far more than PyTorch's own rounding: fails.
    far = [1.0, 2.0 + 64 * one]
    j = judge_probe_row(probe, key, ok(far, (2,)), ok(torch_dt, (2,)), ok(ref64, (2,)))
    assert j.verdict == verdicts.FAIL
    # Where PyTorch in the dtype is exact, the floor alone: one ulp passes, two do not.
    one_ulp = [1.0, 2.0 + 2 * one]
    two_ulps = [1.0, 2.0 + 4 * one]
    assert (
        judge_probe_row(probe, key, ok(one_ulp, (2,)), ok(ref64, (2,)), ok(ref64, (2,))).verdict
        == verdicts.PASS
    )
    assert (
        judge_probe_row(probe, key, ok(two_ulps, (2,)), ok(ref64, (2,)), ok(ref64, (2,))).verdict
        == verdicts.FAIL
    )


def test_the_float64_rule_leaves_exact_values_f64_rows_and_overflow_alone():
    off, ref = [1.0, 2.001], [1.0, 2.0]
    # float64 rows: the tolerance only.
    probe = _probe([_case("c", ["y"])])
    j = judge_probe_row(probe, _key(dtype="f64"), ok(off, (2,)), ok(ref, (2,)), ok(ref, (2,)))
    assert j.verdict == verdicts.FAIL and j.fp64 is None
    # Exact values are the reference: no rule.
    exact = _probe([_case("c", ["y"], exact={"y": {"values": ref}})])
    j = judge_probe_row(exact, _key(dtype="f16"), ok(off, (2,)), None, ok(off, (2,)))
    assert j.verdict == verdicts.FAIL and j.fp64 is None
    # PyTorch f16 overflowed where float64 is finite: the bound would be infinite.
    j = judge_probe_row(
        probe,
        _key(dtype="f16"),
        ok([1.0, 70000.0], (2,)),
        ok([1.0, math.inf], (2,)),
        ok([1.0, 70000.0], (2,)),
    )
    assert j.verdict == verdicts.FAIL and j.fp64 is None
    assert "float64-referenced rule not applied" in j.message
    # A float64 reference that errored: the tolerance only, and the note says why.
    err64 = Outcome.error("c", "y", "boom")
    j = judge_probe_row(probe, _key(), ok(off, (2,)), ok(ref, (2,)), err64)
    assert j.verdict == verdicts.FAIL
    assert "float64-referenced rule not applied: torch f64 cpu framework-error" in j.message


def test_fp64_check_direct():
    ref64 = np.array([1.0, 2.0])
    cand, torch32 = ref64 + np.array([0, 2**-22]), ref64 + np.array([2**-23, 0])
    c = fp64_check("y", cand, torch32, ref64, "f32")
    assert c.passed and c.multiplier == 3.0 and c.floor == 2.0**-22  # one ulp at 2
    assert c.bound == 3 * 2**-23 + 2**-22
    assert fp64_check("y", ref64, ref64[:1], ref64, "f32") is None


def test_known_bugs_of_half_precision_device_dtype_keys():
    bug = {"candle": {"cpu-f16": {"y": {"values": [5.0, 5.0]}}, "cpu-bf16": {"y": "non-finite"}}}
    probe = _probe([_case("c", ["y"], known_bug=bug)])
    ref = ok([1.0, 2.0], (2,))
    j = judge_probe_row(probe, _key(dtype="f16"), ok([5.0, 5.0], (2,)), ref, ref)
    assert j.verdict == verdicts.KNOWN_BUG
    j = judge_probe_row(probe, _key(dtype="f16"), ref, ref, ref)
    assert j.verdict == verdicts.KNOWN_BUG_FIXED
    j = judge_probe_row(probe, _key(dtype="bf16"), ok([math.nan, 2.0], (2,)), ref, ref)
    assert j.verdict == verdicts.KNOWN_BUG
    # Another dtype of the same device is not covered.
    j = judge_probe_row(probe, _key(dtype="f32"), ok([5.0, 5.0], (2,)), ref, ref)
    assert j.verdict == verdicts.FAIL


# ----- the plan ----------------------------------------------------------------------------------


def _plan(tmp_path, **probes_over):
    import yaml

    doc = {
        "description": "d",
        "inputs": {"x": {"values": [1.0, 2.0], "requires_grad": True}},
        "cases": {"c": {"steps": [{"relu": {"in": "x", "out": "y"}}], "compare": ["y"]}},
    }
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(doc))
    config = load_config()
    config.update(devices=["cpu", "metal"], probes={"folder": str(tmp_path), **probes_over})
    config["candle"]["versions"] = ["0.11.0"]  # the release axis: test_versions.py
    config["burn"]["versions"] = ["0.22.1"]
    return ProbePlan.from_config(config, REPO)


def test_the_probe_dtypes_extend_the_training_matrix_only_for_probes():
    assert devices.DTYPES == ("f32", "f64")
    assert frameworks.PROBE_DTYPES == ("f32", "f64", "f16", "bf16")
    if hasattr(probes, "PROBE_DTYPES"):
        assert set(probes.PROBE_DTYPES) == set(frameworks.PROBE_DTYPES)
    assert frameworks.unsupported_reason("burn", "cpu", "f16") is None  # not a training cell
    why = frameworks.probe_unsupported_reason("burn", "cpu", "f16")
    assert "ndarray" in why and "f16" in why
    assert "CPU only" in frameworks.probe_unsupported_reason("burn", "cuda", "bf16")
    assert "float64" in frameworks.probe_unsupported_reason("candle", "metal", "f64")
    for fw in ("torch", "candle"):
        for dev in ("cpu", "cuda", "metal"):
            for dt in ("f16", "bf16"):
                assert frameworks.probe_unsupported_reason(fw, dev, dt) is None


def test_plan_dtypes_default_to_all_four(tmp_path):
    plan = _plan(tmp_path)
    assert plan.dtypes == ["f32", "f64", "f16", "bf16"]
    assert plan.fp64_rule == FP64_RULE_DEFAULTS
    jobs = set(plan.jobs())
    # 3 frameworks × 4 dtypes × 2 devices; burn runs f32 and f64 on the CPU only, float64
    # does not run on Metal.
    assert len(plan.cells()) == 24 and len(jobs) == 16
    assert _key("burn", "f16", probe="one") not in jobs
    assert _key("burn", "f32", probe="one") in jobs
    assert "ndarray" in plan.unsupported(ProbeKey("one", "burn", "bf16", "cpu"))
    assert ProbeKey("one", "candle", "f16", "metal") in jobs
    assert ProbeKey("one", "torch", "bf16", "metal") in jobs
    assert ProbeKey("one", "torch", "f64", "metal") not in jobs
    # Cells in table order: dtype f32, f64, f16, bf16.
    assert [k.dtype for k in plan.cells()][:3] == ["f32", "f32", "f32"]
    assert plan.cells()[-1].dtype == "bf16"


def test_plan_runs_the_float64_reference_whenever_any_dtype_runs(tmp_path):
    plan = _plan(tmp_path, dtypes=["f16"], fp64_rule={"multiplier": 2.5})
    ref64 = ProbeKey("one", "torch", "f64", "cpu")
    assert ref64 in plan.jobs() and ref64 in plan.cells()
    assert ProbeKey("one", "torch", "f16", "cpu").reference64 == ref64
    assert ProbeKey("one", "candle", "f16", "metal").reference64 == ref64
    assert {k.dtype for k in plan.jobs()} == {"f16", "f64"}
    assert plan.fp64_rule == {"multiplier": 2.5, "floor_ulps": 1.0}
    again = ProbePlan.from_params(plan.to_params())
    assert again.jobs() == plan.jobs() and again.fp64_rule == plan.fp64_rule
    # A per-device plan keeps the dtypes and the rule.
    cpu = plan.for_devices(["cpu"])
    assert cpu.dtypes == ["f16"] and cpu.fp64_rule == plan.fp64_rule and ref64 in cpu.jobs()
    with pytest.raises(ValueError, match="f8"):
        ProbePlan({}, ["cpu"], ["f8"])


def test_config_schema_takes_probe_dtypes_and_the_rule():
    import jsonschema
    import yaml

    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    config = load_config()
    assert config["probes"]["dtypes"] == ["f32", "f64", "f16", "bf16"]
    assert config["probes"]["fp64_rule"] == {"multiplier": "auto", "floor_ulps": 1}
    jsonschema.validate(config, schema)
    for bad in (
        {"dtypes": ["f8"]},
        {"dtypes": []},
        {"fp64_rule": {"multiplier": 0.5}},
        {"fp64_rule": {"floor_ulps": -1}},
        {"fp64_rule": {"atol": 1}},
    ):
        c = copy.deepcopy(config)
        c["probes"].update(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(c, schema)


# ----- the table ---------------------------------------------------------------------------------


def test_table_rows_carry_shape_and_the_float64_errors(tmp_path, softmax_grads):
    g32, g64 = softmax_grads
    plan = ProbePlan({"softmax_t": SOFTMAX_T}, ["cpu"], ["f32", "f16"])
    candidate = (g64 - 0.78 * (g32 - g64)).astype(np.float32).astype(np.float64)
    by_key = {
        ("torch", "f32"): g32,
        ("torch", "f64"): g64,
        ("candle", "f32"): candidate,
        ("burn", "f32"): candidate,
        ("torch", "f16"): g32,
        ("candle", "f16"): g32,
    }
    results = {
        k: {
            ("softmax_t", "x.grad"): Outcome.ok(
                "softmax_t", "x.grad", by_key[(k.framework, k.dtype)], (3, 4)
            )
        }
        for k in plan.jobs()
    }
    assert set(results) == {ProbeKey("softmax_t", f, d, "cpu") for f, d in by_key}
    rows = {(r["framework"], r["dtype"]): r for r in table_rows(plan, results, {})}
    burn = rows[("burn", "f32")]
    assert burn["verdict"] == verdicts.PASS and burn["shape"] == [3, 4]
    assert burn["fp64_diff"] == pytest.approx(np.abs(candidate - g64).max())
    assert burn["reference_fp64_diff"] == pytest.approx(np.abs(g32 - g64).max())
    assert burn["reference64_values"] == g64.tolist()
    assert rows[("torch", "f64")]["verdict"] == verdicts.REFERENCE
    assert rows[("torch", "f64")]["fp64_diff"] is None
    # The reference row shows its own error against float64: the scale of the rule.
    torch32 = rows[("torch", "f32")]
    assert torch32["verdict"] == verdicts.REFERENCE
    assert torch32["note"] == "float64 error: max|torch f32 cpu − torch f64 cpu| = 6.25e-07"
    assert torch32["reference_fp64_diff"] == pytest.approx(np.abs(g32 - g64).max())
    assert rows[("burn", "f16")]["verdict"] == verdicts.UNSUPPORTED
    assert rows[("burn", "f16")]["fp64_diff"] is None
    out_csv, out_md = tmp_path / "probes.csv", tmp_path / "probes.md"
    write_table(plan, list(rows.values()), str(out_csv), str(out_md), logging.getLogger("t"))
    header = out_csv.read_text().splitlines()[0].split(",")
    assert tuple(header) == PROBE_COLUMNS
    for column in ("shape", "reference64_values", "fp64_diff", "reference_fp64_diff"):
        assert column in header
    md = out_md.read_text()
    assert "| shape |" in md and "[3, 4]" in md and "passed by the float64-referenced rule" in md
    assert (tmp_path / "probes.html").exists()


# ----- the verdict of values and the known-bug match ---------------------------------------


def _probe_verdict(worst, bug=None, **flags):
    """The verdict of values whose max difference from the reference is ``worst`` and from a
    recorded known bug's values ``bug`` (None: no bug recorded), tolerance 1e-6: the value
    verdict, then the known-bug match, as ``judge_probe_row`` reaches it."""
    verdict = value_verdict(closeness.within(worst, 1e-6), **flags)
    reproduced = bug is not None and closeness.within(bug, 1e-6)
    return match_known_bug(verdict, bug is not None, reproduced)


@pytest.mark.parametrize(
    ("worst", "bug", "non_finite", "verdict"),
    [
        (0.0, None, False, verdicts.PASS),
        (0.0, 5.0, False, verdicts.KNOWN_BUG_FIXED),
        (5.0, 0.0, False, verdicts.KNOWN_BUG),
        (5.0, 5.0, False, verdicts.FAIL),
        (math.inf, None, True, verdicts.NON_FINITE),
        (math.inf, 0.0, True, verdicts.KNOWN_BUG),  # the known bug's own NaN/Inf, reproduced
        (math.nan, None, False, verdicts.FAIL),  # values of another size
    ],
)
def test_probe_verdict(worst, bug, non_finite, verdict):
    assert _probe_verdict(worst, bug, non_finite=non_finite) == verdict


@pytest.mark.parametrize(
    ("worst", "bug", "fp64_pass", "invalid", "verdict"),
    [
        (5.0, None, True, False, verdicts.PASS),  # the float64-referenced rule passes it
        (5.0, None, False, False, verdicts.FAIL),
        (5.0, 5.0, True, False, verdicts.KNOWN_BUG_FIXED),
        (0.0, None, False, True, verdicts.FAIL),  # equal values in another shape
        (0.0, None, True, True, verdicts.FAIL),  # no rule passes a shape that differs
        (0.0, 0.0, False, True, verdicts.KNOWN_BUG),  # a recorded bug of that shape
        (math.inf, None, True, False, verdicts.PASS),  # only the rule decides then
    ],
)
def test_probe_verdict_with_the_fp64_rule_and_invalid_values(
    worst, bug, fp64_pass, invalid, verdict
):
    got = _probe_verdict(worst, bug, fp64_pass=fp64_pass, invalid=invalid)
    assert got == verdict
