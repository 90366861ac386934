"""API limits told apart from bugs (parity.probe.api_limits): a valid step a framework
refuses by design is ``unsupported`` with the table's reason, in the probes and in the
fuzzer; a crash on valid input stays ``framework-error``. Exact verdicts, on the real
candle and burn binaries."""

import logging

import numpy as np
import pytest
import yaml

from parity.compare import verdicts
from parity.fuzz import check
from parity.fuzz.generate import Case, Input, Route
from parity.probe import api_limits
from parity.probe import rust as rust_probe
from parity.probe import torch as probe_torch
from parity.probe.judge import judge_probe_row
from parity.probe.loader import load
from parity.probe.plan import ProbeKey

LOG = logging.getLogger("test")

PROBE = {
    "description": "API limits and a crash on valid input.",
    "inputs": {
        "x": {"arange": {"start": 1}, "shape": [1, 1, 4, 4], "requires_grad": True},
        "xc": {"arange": {"start": 1}, "shape": [1, 1, 4, 4]},
        "u": {"values": [[[1, 2]]], "requires_grad": True},
        "g": {"values": [[1, 2, 3], [4, 5, 6]], "requires_grad": True},
        "i_small": {"values": [[2, 0]], "dtype": "int64"},
        "i_full": {"values": [[2, 0, 1], [1, 1, 0]], "dtype": "int64"},
        "h": {"values": [[[[1], [2]]]], "requires_grad": True},
        "s_small": {"values": [[1, 2]], "requires_grad": True},
        "k": {"values": [[[[2]]]], "requires_grad": True},
    },
    "cases": {
        # candle: avg_pool2d's backward needs stride = kernel (backprop.rs bails out)
        "avg_pool_stride_backward": {
            "steps": [{"avg_pool2d": {"in": "x", "out": "y", "kernel": 1, "stride": 2}}],
            "loss": {"sum": "y"},
            "compare": ["y", "x.grad"],
        },
        # the same step without a backward pass runs
        "avg_pool_stride_forward": {
            "steps": [{"avg_pool2d": {"in": "x", "out": "y", "kernel": 1, "stride": 2}}],
            "compare": ["y"],
        },
        # ... and so does a backward pass that does not reach it
        "avg_pool_stride_no_grad_path": {
            "steps": [
                {"avg_pool2d": {"in": "xc", "out": "y", "kernel": 1, "stride": 2}},
                {"avg_pool2d": {"in": "x", "out": "z", "kernel": 2}},
            ],
            "loss": {"sum": "z"},
            "compare": ["y", "x.grad"],
        },
        "upsample_fraction_backward": {
            "steps": [{"upsample_nearest1d": {"in": "u", "out": "y", "size": 3}}],
            "loss": {"sum": "y"},
            "compare": ["u.grad"],
        },
        # burn: gather needs the index's shape equal to the input's outside dim
        "gather_smaller_index": {
            "steps": [{"gather": {"in": ["g", "i_small"], "out": "y", "dim": 1}}],
            "loss": {"sum": "y"},
            "compare": ["y", "g.grad"],
        },
        "gather_full_index": {
            "steps": [{"gather": {"in": ["g", "i_full"], "out": "y", "dim": 1}}],
            "loss": {"sum": "y"},
            "compare": ["y", "g.grad"],
        },
        # candle and burn: scatter_add needs index and src of x's shape outside dim
        "scatter_add_smaller_index": {
            "steps": [{"scatter_add": {"in": ["g", "i_small", "s_small"], "out": "y", "dim": 1}}],
            "compare": ["y"],
        },
        # candle: conv2d's backward with stride 3 over a height of 2 fails deep inside
        # ("shape mismatch in add"): a finding, no documented limit
        "conv2d_stride_crash": {
            "steps": [{"conv2d": {"in": ["h", "k"], "out": "y", "stride": 3}}],
            "loss": {"sum": "y"},
            "compare": ["h.grad"],
        },
    },
}

CANDLE_LIMITED = {
    "avg_pool_stride_backward": "avg_pool2d",
    "upsample_fraction_backward": "upsample_nearest1d",
    "scatter_add_smaller_index": "scatter_add",
}
BURN_LIMITED = {"gather_smaller_index": "gather", "scatter_add_smaller_index": "scatter_add"}


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "api_limits.yaml"
    path.write_text(yaml.safe_dump(PROBE, sort_keys=False))
    return load(path)


def test_the_table_names_the_limited_cases(probe):
    assert {c: x.op for c, x in api_limits.case_limits(probe, "candle").items()} == CANDLE_LIMITED
    assert {c: x.op for c, x in api_limits.case_limits(probe, "burn").items()} == BURN_LIMITED
    assert api_limits.case_limits(probe, "torch") == {}


def test_every_row_has_a_reason_and_a_source():
    for op, fw, condition, reason, source in api_limits.rows():
        assert fw in ("candle", "burn") and condition and reason, op
        assert source.startswith("https://docs.rs/crate/"), source


def test_without_cases_and_merge_keep_the_quantity_order(probe):
    limited = api_limits.case_limits(probe, "candle")
    reduced = api_limits.without_cases(probe, list(limited))
    assert [c["name"] for c in reduced.cases] == [
        c["name"] for c in probe.cases if c["name"] not in CANDLE_LIMITED
    ]
    assert api_limits.without_cases(probe, [c["name"] for c in probe.cases]) is None


def verdicts_of(framework, binary, probe, dtype, tmp_path):
    """(case, quantity) → (verdict, message) of ``framework`` against PyTorch."""
    key = ProbeKey(probe.name, framework, dtype, "cpu")
    ((_, outcomes, _),) = rust_probe.run_batch(
        [probe], framework, dtype, "cpu", binary, 1, LOG, None
    )
    torch = {(o.case, o.quantity): o for o in probe_torch.run(probe, dtype, "cpu", 1, LOG)}
    out = {}
    for o in outcomes:
        ref = torch[(o.case, o.quantity)]
        j = judge_probe_row(probe, key, o, ref, ref)
        out[(o.case, o.quantity)] = (j.verdict, o.message or "")
    assert [k for k in out] == probe.quantities()
    return out


def test_candle_limits_are_unsupported_and_a_crash_stays_a_finding(candle_binary, probe, tmp_path):
    got = verdicts_of("candle", candle_binary, probe, "f64", tmp_path)
    expected = {q: verdicts.PASS for q in probe.quantities()}
    for case, quantity in probe.quantities():
        if case in CANDLE_LIMITED:
            expected[(case, quantity)] = verdicts.UNSUPPORTED
    expected[("conv2d_stride_crash", "h.grad")] = verdicts.FRAMEWORK_ERROR
    # a finding of this test: gather's forward takes the smaller index, its backward's
    # scatter-add refuses it deep inside the backward pass (no documented limit)
    expected[("gather_smaller_index", "g.grad")] = verdicts.FRAMEWORK_ERROR
    assert {q: v for q, (v, _) in got.items()} == expected
    message = got[("avg_pool_stride_backward", "x.grad")][1]
    assert "backward only for stride = kernel" in message and "backprop.rs#348" in message
    assert "shape mismatch in add" in got[("conv2d_stride_crash", "h.grad")][1]
    assert "shape mismatch in scatter" in got[("gather_smaller_index", "g.grad")][1]


def test_burn_gather_limit_is_unsupported(burn_binary, probe, tmp_path):
    got = verdicts_of("burn", burn_binary, probe, "f64", tmp_path)
    assert got[("gather_smaller_index", "y")][0] == verdicts.UNSUPPORTED
    assert got[("gather_smaller_index", "g.grad")][0] == verdicts.UNSUPPORTED
    assert "index to have the input's shape" in got[("gather_smaller_index", "y")][1]
    assert got[("gather_full_index", "y")][0] == verdicts.PASS
    assert got[("gather_full_index", "g.grad")][0] == verdicts.PASS


def test_a_batch_of_limited_cases_only_still_has_its_runner_metadata(candle_binary, probe):
    only = api_limits.without_cases(
        probe, [c["name"] for c in probe.cases if c["name"] not in CANDLE_LIMITED]
    )
    ((_, outcomes, metadata),) = rust_probe.run_batch(
        [only], "candle", "f32", "cpu", candle_binary, 1, LOG, None
    )
    assert {o.status for o in outcomes} == {verdicts.UNSUPPORTED}
    assert metadata["framework_version"]


def _contiguous_input(shape, values):
    return Input(tuple(shape), Route(), tuple(shape), tuple(float(v) for v in values))


def test_the_fuzzer_follows_the_table(candle_binary):
    """candle's avg_pool2d with stride ≠ kernel is no finding of the fuzzer; its wrong
    gradient over an uncovered border (stride = kernel) still is."""
    runners = check.Runners({"candle": candle_binary})
    refused = Case(
        "avg_pool2d",
        {"kernel": 1, "stride": 2, "padding": 0},
        (_contiguous_input([1, 1, 1, 1], [3]),),
        (1, 1, 1, 1),
        (1.0,),
    )
    border = Case(
        "avg_pool2d",
        {"kernel": 2, "stride": 2, "padding": 0},
        (_contiguous_input([1, 1, 2, 5], np.arange(10) - 4),),
        (1, 1, 1, 2),
        (1.0, 2.0),
    )
    found = check.run_check(
        [("refused", refused), ("border", border)], runners, ["candle"], ["f32"]
    )
    assert found["refused"] == []
    assert [(f.verdict, f.kind) for f in found["border"]] == [(verdicts.FAIL, check.INPUT_GRAD)]
