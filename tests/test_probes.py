"""The probe format, the probe plan, the result schema and the judging (no frameworks)."""

import copy
import json
import math

import numpy as np
import pytest
import yaml

from parity.compare import verdicts
from parity.probe.format import ProbeError
from parity.probe.judge import judge_probe_row
from parity.probe.loader import discover, load, parse
from parity.probe.ops import op_defaults, op_names
from parity.probe.plan import ProbeKey, ProbePlan
from parity.probe.results import Outcome, ProbeResultError, read_results, write_results
from parity.render.tables import number, values_text

from conftest import REPO, load_config

PROBES = REPO / "probes"

CONV1D = {
    "description": "conv1d kernel gradient",
    "inputs": {
        "x": {"arange": {"start": 0}, "shape": [2, 1, 6]},
        "w": {"values": [[[1, -1, 2]], [[0.5, 0.25, -2]]], "requires_grad": True},
        "c": {"arange": {"start": 1}, "shape": [2, 2, 4]},
    },
    "cases": {
        "batch2": {
            "steps": [{"conv1d": {"in": ["x", "w"], "out": "y"}}],
            "loss": {"weighted_sum": ["y", "c"]},
            "compare": ["loss", "w.grad"],
        }
    },
}


def write_probe(folder, name, doc):
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return path


def test_repository_probes_load_and_normalize():
    probes = discover(PROBES)
    assert {"conv1d_grad", "conv1d_contiguity", "conv2d_grad"} <= set(probes)
    p = probes["conv1d_grad"]
    x = next(i for i in p.spec["inputs"] if i["name"] == "x")
    assert x["shape"] == [2, 1, 6] and x["values"] == [float(i) for i in range(12)]
    w = next(i for i in p.spec["inputs"] if i["name"] == "w")
    assert w["shape"] == [2, 1, 3] and w["requires_grad"] is True
    step = p.case("batch2")["steps"][0]
    assert step == {
        "out": "y",
        "inputs": ["x", "w"],
        "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1},
    }
    assert p.case("batch2")["exact"]["w.grad"] == {
        "values": [340.0, 392.0, 444.0, 484.0, 568.0, 652.0]
    }
    bug = p.case("batch2")["known_bug"]["candle"]["cpu"]["w.grad"]
    assert bug == {"values": [220.0, 256.0, 292.0, 508.0, 608.0, 708.0]}
    assert p.quantities() == [("batch2", "loss"), ("batch2", "w.grad"), ("batch1", "w.grad")]


def test_runner_spec_carries_only_the_computation():
    spec = load(PROBES / "conv1d_grad.yaml").runner_spec("f64", "cpu")
    assert spec["dtype"] == "f64" and spec["device"] == "cpu"
    assert set(spec["cases"][0]) == {
        "name",
        "steps",
        "loss",
        "optimizer",
        "optimizer_steps",
        "accumulate",
        "micro_batches",
        "grad_transforms",
        "compare",
    }
    assert spec["cases"][0]["loss"] == [{"kind": "weighted_sum", "input": "y", "weights": "c"}]
    assert spec["cases"][0]["optimizer_steps"] == 1
    assert spec["inputs"][0] == {
        "name": "x",
        "dtype": "float",
        "shape": [2, 1, 6],
        "values": [float(i) for i in range(12)],
        "requires_grad": False,
    }


def test_defaults_come_from_the_schema():
    assert op_defaults("conv2d") == {"padding": 0, "stride": 1, "dilation": 1, "groups": 1}
    assert op_defaults("softmax") == {"dim": -1, "candle": "fused"}
    assert op_defaults("layer_norm") == {"eps": 1e-5, "candle": "fused"}
    assert op_defaults("matmul") == {}


def test_torch_implements_exactly_the_schema_ops():
    from parity.probe.torch import OPS

    assert set(OPS) == set(op_names())


def test_arange_scale_and_single_number_reference(tmp_path):
    doc = copy.deepcopy(CONV1D)
    doc["inputs"]["x"] = {"arange": {"start": 1, "scale": 0.1}, "shape": [2, 1, 6]}
    doc["cases"]["batch2"]["exact"] = {"loss": -84}
    p = parse(tmp_path / "p.yaml", doc)
    x = p.spec["inputs"][0]["values"]
    assert x[3] == 1 + 0.1 * 3  # float64 arithmetic, as both sides get it
    assert p.case("batch2")["exact"]["loss"] == {"fill": -84.0}


# ----- malformed probe files are refused, naming the file and the field -----------------


def _edit(path, value):
    def apply(doc):
        target = doc
        for k in path[:-1]:
            target = target[k]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return apply


_DELETE = object()
STEP = ("cases", "batch2", "steps", 0)


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (_edit((*STEP, "conv1d", "paddin"), 1), "cases.batch2.steps[0].conv1d", "paddin"),
        (
            _edit(STEP, {"conv3d": {"in": ["x", "w"], "out": "y"}}),
            "cases.batch2.steps[0]",
            "unknown op 'conv3d'; did you mean 'conv2d'? the ops are transpose, narrow,",
        ),
        (_edit((*STEP, "conv1d", "padding"), -1), "cases.batch2.steps[0].conv1d.padding", "-1"),
        (_edit((*STEP, "conv1d", "in"), ["x", "k"]), "cases.batch2.steps[0].conv1d.in[1]", "'k'"),
        (_edit((*STEP, "conv1d", "in"), ["x"]), "cases.batch2.steps[0].conv1d.in", "short"),
        (_edit((*STEP, "conv1d", "out"), "x"), "cases.batch2.steps[0].conv1d.out", "already"),
        (_edit((*STEP, "conv1d", "out"), "loss"), "cases.batch2.steps[0].conv1d.out", "loss"),
        (_edit(("cases", "batch2", "compare"), ["x.grad"]), "cases.batch2.compare[0]", "x.grad"),
        (_edit(("cases", "batch2", "compare"), ["w.gard"]), "cases.batch2.compare[0]", "w.gard"),
        (_edit(("cases", "batch2", "compare"), ["z"]), "cases.batch2.compare[0]", "'z'"),
        (
            _edit(("cases", "batch2", "exact"), {"w.grad": [1] * 6, "y": 1}),
            "cases.batch2.exact.y",
            "not in compare",
        ),
        (
            _edit(("cases", "batch2", "known_bug"), {"candle": {"tpu": {"w.grad": 1}}}),
            "cases.batch2.known_bug.candle",
            "tpu",
        ),
        (_edit(("inputs", "w", "ones"), [2, 1, 3]), "inputs.w", "Exactly one of values"),
        (_edit(("inputs", "x", "shape"), _DELETE), "inputs.x", "Exactly one of values"),
        (_edit(("inputs", "w", "values"), [[1, 2], [3]]), "inputs.w.values[1]", "ragged"),
        (_edit(("inputs", "w", "values"), [1, "a"]), "inputs.w.values[1]", "number"),
        (_edit(("inputs", "w", "shape"), [4]), "inputs.w.shape", "holds 4 values"),
        (_edit(("description",), _DELETE), "(top level)", "description"),
        (_edit(("cases", "batch2", "loss"), _DELETE), "cases.batch2.compare[0]", "no loss"),
        (
            _edit(("cases", "batch2", "optimizer"), {"adamw": {"lr": 0.1}}),
            "cases.batch2.optimizer.adamw",
            "betas",
        ),
        (
            _edit(STEP, {"softmax": {"in": "x", "out": "y", "dim": 0}}),
            "cases.batch2.steps[0].softmax.dim",
            "last dimension",
        ),
    ],
)
def test_malformed_probe_is_refused_naming_file_and_field(tmp_path, edit, field, words):
    doc = copy.deepcopy(CONV1D)
    edit(doc)
    path = write_probe(tmp_path, "bad_probe", doc)
    with pytest.raises(ProbeError) as e:
        load(path)
    message = str(e.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message, message
    assert e.value.field == field


def test_unreadable_yaml_and_bad_file_names_are_refused(tmp_path):
    path = write_probe(tmp_path, "broken", "inputs: [unclosed\n")
    with pytest.raises(ProbeError, match=r"broken\.yaml: not valid YAML"):
        load(path)
    path = write_probe(tmp_path, "Conv", CONV1D)
    with pytest.raises(ProbeError, match="file name 'Conv'"):
        load(path)


def test_discover_refuses_a_missing_folder_or_selection(tmp_path):
    with pytest.raises(ProbeError, match="does not exist"):
        discover(tmp_path / "nope")
    write_probe(tmp_path, "one", CONV1D)
    assert list(discover(tmp_path)) == ["one"]
    with pytest.raises(ProbeError, match="'two' has no file"):
        discover(tmp_path, ["two"])


# ----- format v2: new forms, normalized ------------------------------------------------


def _one_case(inputs, steps, compare, **case):
    return {
        "description": "v2",
        "inputs": inputs,
        "cases": {"c": {"steps": steps, "compare": compare, **case}},
    }


def _parse(tmp_path, doc, name="v2"):
    """Write ``doc`` as YAML and load it (as the workflow does)."""
    return load(write_probe(tmp_path, name, doc))


def test_every_repository_probe_loads_through_load():
    for path in sorted(PROBES.glob("*.yaml")):
        p = load(path)
        for case in p.cases:
            assert case["expect"] == "values" and case["optimizer_steps"] >= 1
            assert set(p.quantity_shapes(case)) == set(case["compare"])


def test_pairs_pool_strides_and_defaults_are_explicit(tmp_path):
    steps = [
        {"conv2d": {"in": ["x", "w"], "out": "a", "padding": 1, "stride": [1, 2]}},
        {"max_pool2d": {"in": "x", "out": "b", "kernel": 2}},
        {"avg_pool2d": {"in": "x", "out": "c", "kernel": [2, 1], "padding": [1, 0]}},
        {"max_pool1d": {"in": "l", "out": "d", "kernel": 3, "stride": 1}},
        {"conv_transpose2d": {"in": ["x", "w"], "out": "e"}},
        {"conv_transpose1d": {"in": ["l", "k"], "out": "f", "stride": 2}},
    ]
    doc = _one_case(
        {
            "x": {"ones": [1, 1, 4, 4]},
            "w": {"ones": [1, 1, 2, 2]},
            "l": {"ones": [1, 1, 5]},
            "k": {"ones": [1, 1, 2]},
        },
        steps,
        ["a", "b", "c", "d", "e", "f"],
    )
    ops = [s["op"] for s in _parse(tmp_path, doc).case("c")["steps"]]
    assert ops == [
        {"name": "conv2d", "padding": [1, 1], "stride": [1, 2], "dilation": [1, 1], "groups": 1},
        {
            "name": "max_pool2d",
            "kernel": [2, 2],
            "stride": [2, 2],
            "padding": [0, 0],
            "dilation": [1, 1],
            "ceil_mode": False,
        },
        {
            "name": "avg_pool2d",
            "kernel": [2, 1],
            "stride": [2, 1],
            "padding": [1, 0],
            "count_include_pad": True,
            "ceil_mode": False,
        },
        {
            "name": "max_pool1d",
            "kernel": 3,
            "stride": 1,
            "padding": 0,
            "dilation": 1,
            "ceil_mode": False,
        },
        {
            "name": "conv_transpose2d",
            "padding": [0, 0],
            "output_padding": [0, 0],
            "stride": [1, 1],
            "dilation": [1, 1],
            "groups": 1,
        },
        {
            "name": "conv_transpose1d",
            "padding": 0,
            "output_padding": 0,
            "stride": 2,
            "dilation": 1,
            "groups": 1,
        },
    ]


def test_reductions_activations_sorting_and_losses_are_explicit(tmp_path):
    steps = [
        {"sum": {"in": "x", "out": "a"}},
        {"mean": {"in": "x", "out": "b", "dim": 1}},
        {"max": {"in": "x", "out": "c", "dim": [0, -1], "keepdim": True}},
        {"argmax": {"in": "x", "out": "d", "dim": 0}},
        {"argsort": {"in": "x", "out": "e"}},
        {"sort": {"in": "x", "out": "f", "dim": 0, "descending": True}},
        {"gelu": {"in": "x", "out": "g"}},
        {"elu": {"in": "x", "out": "h", "alpha": 2}},
        {"log_softmax": {"in": "x", "out": "i"}},
        {"cross_entropy": {"in": ["x", "t"], "out": "j"}},
        {"nll": {"in": ["i", "t"], "out": "k", "reduction": "none"}},
        {"mse": {"in": ["x", "x"], "out": "m", "reduction": "sum"}},
        {"embedding": {"in": ["t", "x"], "out": "n"}},
        {"index_select": {"in": ["x", "t"], "out": "o", "dim": 1}},
    ]
    doc = _one_case(
        {"x": {"arange": {}, "shape": [2, 3]}, "t": {"values": [0, 1], "dtype": "int64"}},
        steps,
        ["a", "d", "e", "k", "n", "o"],
    )
    p = _parse(tmp_path, doc)
    ops = [s["op"] for s in p.case("c")["steps"]]
    assert ops[:3] == [
        {"name": "sum", "dims": None, "keepdim": False},
        {"name": "mean", "dims": [1], "keepdim": False},
        {"name": "max", "dims": [0, -1], "keepdim": True},
    ]
    assert ops[3] == {"name": "argmax", "dim": 0, "keepdim": False}
    assert ops[4] == {"name": "argsort", "dim": -1, "descending": False}
    assert ops[5] == {"name": "sort", "dim": 0, "descending": True}
    assert ops[6] == {"name": "gelu", "approximate": "none"}
    assert ops[7] == {"name": "elu", "alpha": 2.0} and isinstance(ops[7]["alpha"], float)
    assert ops[8] == {"name": "log_softmax", "dim": -1}
    assert ops[9] == {"name": "cross_entropy", "reduction": "mean"}
    assert ops[10] == {"name": "nll", "reduction": "none"}
    assert ops[11] == {"name": "mse", "reduction": "sum"}
    assert ops[12] == {"name": "embedding"}
    t = next(i for i in p.spec["inputs"] if i["name"] == "t")
    assert t == {"name": "t", "dtype": "int64", "shape": [2], "values": [0.0, 1.0],
                 "requires_grad": False}  # fmt: skip
    assert p.quantity_shapes("c") == {
        "a": ([], "float"),
        "d": ([3], "int64"),
        "e": ([2, 3], "int64"),
        "k": ([2], "float"),
        "n": ([2, 3], "float"),
        "o": ([2, 2], "float"),
    }


def test_optimizers_are_explicit_with_their_steps(tmp_path):
    base = {
        "inputs": {"w": {"values": [1, -2], "requires_grad": True}},
        "loss": {"sum_squares": "w"},
    }
    cases = {
        "sgd": {"optimizer": {"sgd": {"lr": 0.1, "momentum": 0.9}, "steps": 3},
                "compare": ["w.after_step", "w.momentum_buffer"]},
        "plain": {"optimizer": {"sgd": {"lr": 0.1}}, "compare": ["w.after_step"]},
        "adam": {"optimizer": {"adam": {"lr": 0.1, "betas": [0.9, 0.999], "eps": "1e-8",
                                        "weight_decay": 0}},
                 "compare": ["loss", "w.exp_avg", "w.exp_avg_sq"]},
        "adamw": {"optimizer": {"adamw": {"lr": 0.1, "betas": [0.9, 0.999], "eps": 1.0e-8,
                                          "weight_decay": 0.01}, "steps": 2},
                  "compare": ["w.grad"], "exact": {"w.grad": [[2, -4], [1, 2]]}},
    }  # fmt: skip
    doc = {
        "description": "optimizers",
        "inputs": base["inputs"],
        "cases": {n: {"steps": [], "loss": base["loss"], **c} for n, c in cases.items()},
    }
    p = _parse(tmp_path, doc)
    assert p.case("sgd")["optimizer"] == {
        "name": "sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "dampening": 0.0,
        "nesterov": False,
        "weight_decay": 0.0,
    }
    assert p.case("sgd")["optimizer_steps"] == 3
    assert p.case("plain")["optimizer"]["momentum"] == 0.0
    assert p.case("plain")["optimizer_steps"] == 1
    adam = p.case("adam")["optimizer"]
    assert adam == {"name": "adam", "lr": 0.1, "betas": [0.9, 0.999], "eps": 1e-8,
                    "weight_decay": 0.0}  # fmt: skip
    assert p.quantity_shapes("sgd")["w.momentum_buffer"] == ([3, 2], "float")
    # With 2 steps, w.grad is stacked [2, 2]: the nesting of the exact values must be that.
    assert p.case("adamw")["exact"]["w.grad"] == {"values": [2.0, -4.0, 1.0, 2.0]}
    spec = p.runner_spec("f32", "cpu")
    assert {c["name"]: c["optimizer_steps"] for c in spec["cases"]} == {
        "adam": 1,
        "adamw": 2,
        "plain": 1,
        "sgd": 3,
    }


def test_non_finite_inputs_reach_the_runners_as_strings(tmp_path):
    text = """
description: non-finite inputs
inputs:
  x: {values: [.inf, -.inf, .nan, 1, "inf", "-inf", "nan"]}
cases:
  c:
    steps: [{relu: {in: x, out: y}}]
    compare: [y]
"""
    p = load(write_probe(tmp_path, "nonfinite", text))
    values = p.spec["inputs"][0]["values"]
    assert values[:2] == [math.inf, -math.inf] and math.isnan(values[2]) and values[3] == 1.0
    assert values[4:6] == [math.inf, -math.inf] and math.isnan(values[6])
    sent = p.runner_spec("f32", "cpu")["inputs"][0]["values"]
    assert sent == ["inf", "-inf", "nan", 1.0, "inf", "-inf", "nan"]
    assert p.spec["inputs"][0]["values"][0] == math.inf  # the spec itself keeps floats


def test_expect_error_and_case_tolerance_stay_on_the_python_side(tmp_path):
    doc = copy.deepcopy(CONV1D)
    doc["tolerance"] = {"f32": "1e-6", "f16": 1.0e-3}
    doc["cases"]["bad"] = {
        "expect": "error",
        "steps": [{"add": {"in": ["x", "c"], "out": "z"}}],
        "compare": ["z"],
    }
    doc["cases"]["batch2"]["tolerance"] = {"f32": 0.5, "bf16": "2e-2"}
    p = _parse(tmp_path, doc)
    assert p.spec["tolerance"] == {"f32": 1e-6, "f64": 0.0, "f16": 1e-3, "bf16": 0.0}
    assert p.tolerance("f32") == 1e-6
    assert p.case_tolerance("batch2", "f32") == 0.5
    assert p.case_tolerance("batch2", "bf16") == 0.02
    assert p.case_tolerance(p.case("batch2"), "f16") == 1e-3
    assert p.case_tolerance("bad", "f32") == 1e-6
    assert p.case("bad")["expect"] == "error" and p.case("batch2")["expect"] == "values"
    for case in p.runner_spec("f32", "cpu")["cases"]:
        assert "expect" not in case and "tolerance" not in case


def test_fill_values_and_one_number_for_one_element(tmp_path):
    doc = copy.deepcopy(CONV1D)
    doc["cases"]["batch2"]["exact"] = {"loss": -84, "w.grad": {"fill": 3}}
    doc["cases"]["batch2"]["known_bug"] = {"candle": {"cuda-bf16": {"w.grad": [0] * 6}}}
    p = _parse(tmp_path, doc)
    assert p.case("batch2")["exact"] == {"loss": {"fill": -84.0}, "w.grad": {"fill": 3.0}}
    bug = p.case("batch2")["known_bug"]["candle"]["cuda-bf16"]["w.grad"]
    assert bug == {"values": [0.0] * 6}


# ----- format v2: what load refuses, naming the field ------------------------------------

INDEXED = {
    "description": "indices",
    "inputs": {
        "x": {"arange": {}, "shape": [3, 4], "requires_grad": True},
        "i": {"values": [0, 2], "dtype": "int64"},
    },
    "cases": {
        "c": {
            "steps": [{"index_select": {"in": ["x", "i"], "out": "y", "dim": 0}}],
            "loss": {"sum": "y"},
            "compare": ["y", "x.grad"],
        }
    },
}
C = ("cases", "c")
S0 = (*C, "steps", 0)


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (
            _edit((*C, "exact"), {"y": [1, 2, 3]}),
            "cases.c.exact.y",
            "3 values for a quantity of shape [2, 4] (8)",
        ),
        (
            _edit((*C, "exact"), {"y": [[1, 2], [3, 4], [5, 6], [7, 8]]}),
            "cases.c.exact.y",
            "nested as [4, 2], the quantity's shape is [2, 4]",
        ),
        (_edit((*C, "exact"), {"x.grad": 1}), "cases.c.exact.x.grad", "{fill: 1}"),
        (
            _edit((*C, "exact"), {"y": [math.nan] * 8}),
            "cases.c.exact.y[0]",
            ".nan is not a finite number",
        ),
        (
            _edit((*C, "known_bug"), {"burn": {"cpu-f16": {"y": [0] * 7}}}),
            "cases.c.known_bug.burn.cpu-f16.y",
            "7 values",
        ),
        (
            _edit((*C, "known_bug"), {"burn": {"metal-f64": {"y": 0}}}),
            "cases.c.known_bug.burn",
            "metal-f64",
        ),
        (
            _edit((*S0, "index_select", "dim"), 2),
            "cases.c.steps[0].index_select",
            "dim 2 is out of range for a tensor of rank 2",
        ),
        (
            _edit(S0, {"sum": {"in": "x", "out": "y", "dim": [0, 2]}}),
            "cases.c.steps[0].sum",
            "dim 2 is out of range",
        ),
        (
            _edit(S0, {"relu": {"in": "i", "out": "y"}}),
            "cases.c.steps[0].relu",
            "input 0 of relu must be float, got int64",
        ),
        (
            _edit(S0, {"embedding": {"in": ["x", "x"], "out": "y"}}),
            "cases.c.steps[0].embedding",
            "must be int64, got float",
        ),
        (
            _edit(("inputs", "i", "values"), [0, 3]),
            "cases.c.steps[0].index_select",
            "index 3 is out of range: expected 0 … 2",
        ),
        (
            _edit(S0, {"matmul": {"in": ["x", "x"], "out": "y"}}),
            "cases.c.steps[0].matmul",
            "cannot multiply [3, 4] by [3, 4]",
        ),
        (
            _edit(S0, {"max_pool2d": {"in": "x", "out": "y", "kernel": 2}}),
            "cases.c.steps[0].max_pool2d",
            "rank 4",
        ),
        (
            _edit(S0, {"softmaks": {"in": "x", "out": "y"}}),
            "cases.c.steps[0]",
            "did you mean 'softmax'?",
        ),
        (
            _edit((*S0, "index_select", "paddin"), 1),
            "cases.c.steps[0].index_select",
            "'paddin' was unexpected",
        ),
        (
            _edit((*C, "expect"), "error"),
            "cases.c.expect",
            "expect: error, but the steps are valid",
        ),
        (
            _edit((*C, "loss"), {"weighted_sum": ["y", "x"]}),
            "cases.c.loss[0].weighted_sum",
            "equal shapes: [2, 4] and [3, 4]",
        ),
        (_edit((*C, "loss"), {"sum": "i"}), "cases.c.loss[0].sum", "int64"),
        (
            _edit(("inputs", "i", "values"), [0, 1.5]),
            "inputs.i.values",
            "value 1 (1.5) of an int64 input is not an integer",
        ),
        (_edit(("inputs", "i", "values"), [0, math.inf]), "inputs.i.values", "not an integer"),
        (
            _edit(("inputs", "i", "requires_grad"), True),
            "inputs.i.requires_grad",
            "an int64 input has no gradient",
        ),
        (_edit(("inputs", "i", "dtype"), "int32"), "inputs.i.dtype", "'int32' is not one of"),
        (_edit(("inputs", "x", "values"), ["infinity"]), "inputs.x", "Exactly one of values"),
        (_edit((*C, "compare"), ["x.momentum_buffer"]), "cases.c.compare[0]", "momentum buffer"),
        (_edit((*C, "compare"), ["x.exp_avg"]), "cases.c.compare[0]", "Adam's and AdamW's state"),
        (
            _edit((*C, "optimizer"), {"sgd": {"lr": 0.1, "nesterov": True}}),
            "cases.c.optimizer.sgd.nesterov",
            "Nesterov momentum needs a momentum",
        ),
        (
            _edit(
                (*C, "optimizer"),
                {
                    "sgd": {"lr": 0.1},
                    "adam": {"lr": 0.1, "betas": [0.9, 0.9], "eps": 1, "weight_decay": 0},
                },
            ),
            "cases.c.optimizer",
            "One of sgd, adam, adamw",
        ),
        (_edit((*C, "optimizer"), {"steps": 2}), "cases.c.optimizer", "One of sgd, adam, adamw"),
        (
            _edit((*C, "optimizer"), {"sgd": {"lr": 0.1}, "steps": 0}),
            "cases.c.optimizer.steps",
            "0 is less than the minimum of 1",
        ),
        (
            _edit((*C, "tolerance"), {"f32": "1.5e"}),
            "cases.c.tolerance.f32",
            "'1.5e' is not of type 'number'",
        ),
        (
            _edit((*S0, "index_select", "dim"), "1.5e0"),
            "cases.c.steps[0].index_select.dim",
            "written '1.5e0', which YAML 1.1 reads as text; it is taken as the number 1.5",
        ),
        (_edit(("tolerance",), {"f8": 0}), "tolerance", "'f8' was unexpected"),
    ],
)
def test_v2_refusals_name_the_field(tmp_path, edit, field, words):
    doc = copy.deepcopy(INDEXED)
    edit(doc)
    path = write_probe(tmp_path, "bad_probe", doc)
    with pytest.raises(ProbeError) as e:
        load(path)
    message = str(e.value)
    assert e.value.field == field, message
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message, message


def test_expect_error_refuses_exact_values(tmp_path):
    doc = copy.deepcopy(INDEXED)
    doc["cases"]["c"]["steps"][0]["index_select"]["dim"] = 5
    doc["cases"]["c"]["expect"] = "error"
    load(write_probe(tmp_path, "ok_error", doc))
    doc["cases"]["c"]["exact"] = {"y": [0] * 8}
    with pytest.raises(ProbeError) as e:
        load(write_probe(tmp_path, "bad_error", doc))
    assert e.value.field == "cases.c.exact"


def test_integral_exponent_text_is_an_integer(tmp_path):
    doc = copy.deepcopy(INDEXED)
    doc["inputs"]["x"]["shape"] = ["3e0", 4]
    p = load(write_probe(tmp_path, "exp", doc))
    x = next(i for i in p.spec["inputs"] if i["name"] == "x")
    assert x["shape"] == [3, 4] and isinstance(x["shape"][0], int)


def test_reference_doc_is_the_generators_output():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "probe_reference", REPO / "scripts" / "dev" / "probe_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (REPO / "docs" / "probe-reference.md").read_text(encoding="utf-8")
    assert text == module.render(), "run python scripts/dev/probe_reference.py"
    for op in op_names():
        assert f"\n### {op}\n" in text


#: A probe using every op of the schema once (each output shape checked against PyTorch's
#: when it was written), an optimizer loop, every optimizer state and an expected error.
EVERY_OP = """
description: every op once
tolerance: {f32: 1e-6, bf16: 1.0e-2}
inputs:
  x: {arange: {start: 1}, shape: [1, 2, 4, 4], requires_grad: true}
  w: {ones: [2, 2, 3, 3], requires_grad: true}
  l: {values: [.inf, -.inf, .nan, 1, "inf", 2], shape: [1, 2, 3]}
  k: {ones: [2, 2, 2]}
  m: {arange: {}, shape: [3, 4], requires_grad: true}
  lw: {ones: [5, 4]}
  g: {ones: [4]}
  bt: {ones: [2]}
  i: {values: [0, 2, 1], dtype: int64}
  t: {values: [[0, 1, 2, 0], [2, 2, 0, 1], [1, 0, 0, 0]], dtype: int64}
cases:
  all:
    tolerance: {f16: 0.1}
    steps:
      - transpose: {in: m, dim0: 0, dim1: 1, out: a1}
      - narrow: {in: m, dim: 1, start: 1, length: 2, out: a2}
      - broadcast_to: {in: g, shape: [3, 4], out: a3}
      - unsqueeze: {in: m, dim: 0, out: a4}
      - squeeze: {in: a4, dim: 0, out: a5}
      - reshape: {in: m, shape: [2, 6], out: a6}
      - contiguous: {in: a1, out: a7}
      - conv1d: {in: [l, k], out: b1, padding: 1}
      - conv2d: {in: [x, w], out: b2, padding: [1, 0], stride: 2}
      - conv_transpose1d: {in: [l, k, bt], out: b3, stride: 2}
      - conv_transpose2d: {in: [x, w], out: b4, output_padding: 1, stride: 2}
      - max_pool1d: {in: l, kernel: 2, out: b5}
      - max_pool2d: {in: x, kernel: 2, padding: 1, out: b6}
      - avg_pool2d: {in: x, kernel: [2, 1], out: b7}
      - avg_pool1d: {in: l, kernel: 2, count_include_pad: false, out: b8}
      - pad: {in: x, padding: [[1, 0]], out: b9}
      - linear: {in: [m, lw], out: c1}
      - matmul: {in: [m, a1], out: c2}
      - layer_norm: {in: [m, g, g], out: c3}
      - rms_norm: {in: [m, g], out: c8, candle: slow}
      - softmax: {in: m, out: c4}
      - log_softmax: {in: m, dim: 0, out: c5}
      - upsample_nearest1d: {in: l, size: 6, out: c6}
      - upsample_nearest2d: {in: x, size: [8, 2], out: c7}
      - relu: {in: m, out: d1}
      - abs: {in: m, out: d2}
      - sigmoid: {in: m, out: d3}
      - tanh: {in: m, out: d4}
      - silu: {in: m, out: d5}
      - gelu: {in: m, out: d6, approximate: tanh}
      - elu: {in: m, out: d7}
      - exp: {in: m, out: d8}
      - log: {in: m, out: d9}
      - sqrt: {in: m, out: d10}
      - add: {in: [m, a3], out: e1}
      - sub: {in: [m, a3], out: e2}
      - mul: {in: [m, a3], out: e3}
      - div: {in: [m, a3], out: e4}
      - maximum: {in: [m, a3], out: e5}
      - minimum: {in: [m, a3], out: e6}
      - sum: {in: m, out: f1}
      - mean: {in: m, dim: 1, out: f2}
      - max: {in: m, dim: [0, 1], keepdim: true, out: f3}
      - min: {in: m, dim: -1, out: f4}
      - argmax: {in: m, dim: 1, out: f5}
      - argmin: {in: m, dim: 0, keepdim: true, out: f6}
      - sort: {in: m, out: f7}
      - argsort: {in: m, dim: 0, descending: true, out: f8}
      - embedding: {in: [i, m], out: g1}
      - index_select: {in: [m, i], dim: 0, out: g2}
      - gather: {in: [m, t], dim: 0, out: g3}
      - gather: {in: [m, f8], dim: 0, out: g4}
      - scatter_add: {in: [m, t, m], dim: 0, out: g5}
      - scatter: {in: [m, f8, m], dim: 0, out: g6}
      - index_add: {in: [m, i, m], dim: 0, out: g7}
      - index_put: {in: [m, i, m], accumulate: true, out: g8}
      - bce_with_logits: {in: [m, a3], out: h1}
      - cross_entropy: {in: [m, i], out: h2}
      - nll: {in: [c5, i], reduction: none, out: h3}
      - mse: {in: [m, a3], reduction: sum, out: h4}
    loss: [{sum: h1}, {weighted_sum: [m, a3]}]
    optimizer: {adam: {lr: 0.1, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0}, steps: 3}
    compare: [loss, b1, b2, b3, b4, b5, b6, b7, c1, c6, c7, f1, f3, f5, f8, g1, g3, g4, h3,
              m.grad, m.exp_avg, x.after_step]
  sgd:
    steps: []
    loss: {sum_squares: m}
    optimizer: {sgd: {lr: 0.1, momentum: 0.9, nesterov: true}}
    compare: [m.momentum_buffer]
  adamw:
    steps: []
    loss: {sum_squares: m}
    optimizer: {adamw: {lr: 0.1, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 1e-2}}
    compare: [m.exp_avg_sq]
  bad:
    expect: error
    steps:
      - matmul: {in: [m, m], out: y}
    compare: [y]
"""


def test_a_case_with_every_op_normalizes_for_the_runners(tmp_path):
    p = load(write_probe(tmp_path, "every_op", EVERY_OP))
    used = {s["op"]["name"] for c in p.cases for s in c["steps"]}
    assert used == set(op_names())
    shapes = p.quantity_shapes("all")
    # Three Adam steps: every quantity stacked [3, ...].
    assert shapes["loss"] == ([3], "float")
    assert shapes["b4"] == ([3, 1, 2, 10, 10], "float")  # (4 − 1)·2 + 2 + 1 + 1 = 10
    assert shapes["f8"] == ([3, 3, 4], "int64")
    steps = {s["out"]: s["op"] for s in p.case("all")["steps"]}
    assert steps["g8"] == {"name": "index_put", "accumulate": True}
    assert steps["g6"] == {"name": "scatter", "dim": 0}
    assert shapes["x.after_step"] == ([3, 1, 2, 4, 4], "float")
    assert p.case("sgd")["optimizer"]["nesterov"] is True
    spec = p.runner_spec("bf16", "cuda")
    text = json.dumps(spec, allow_nan=False)  # the runners' JSON has no NaN literal
    assert '"values": ["inf", "-inf", "nan", 1.0, "inf", 2.0]' in text
    assert [c["name"] for c in spec["cases"]] == ["all", "sgd", "adamw", "bad"]
    assert p.case_tolerance("all", "f16") == 0.1 and p.case_tolerance("sgd", "bf16") == 0.01


# ----- the plan: jobs per (probe, framework, dtype, device) -------------------------------


def test_plan_follows_the_validity_matrix(tmp_path):
    write_probe(tmp_path, "one", CONV1D)
    config = load_config()
    config.update(
        devices=["cpu", "metal"], probes={"folder": str(tmp_path), "dtypes": ["f32", "f64"]}
    )
    config["candle"]["versions"] = ["0.11.0"]  # the release axis: test_versions.py
    config["burn"]["versions"] = ["0.22.1"]
    plan = ProbePlan.from_config(config, REPO)
    jobs = set(plan.jobs())
    assert ProbeKey("one", "candle", "f32", "metal") in jobs
    assert ProbeKey("one", "candle", "f64", "metal") not in jobs
    assert ProbeKey("one", "torch", "f64", "metal") not in jobs
    assert "Metal" in plan.unsupported(ProbeKey("one", "candle", "f64", "metal"))
    # burn (ndarray) is CPU only: its Metal cells are table rows, never jobs.
    assert ProbeKey("one", "burn", "f32", "cpu") in jobs
    assert plan.unsupported(ProbeKey("one", "burn", "f32", "metal")) is not None
    # 3 frameworks × 2 dtypes × 2 devices; 4 of them cannot run.
    assert len(plan.cells()) == 12 and len(jobs) == 8
    assert ProbeKey("one", "candle", "f32", "cpu").result == (
        "results/probes/one/candle-f32-cpu.parquet"
    )
    # The reference runs on the CPU even when only another device is configured.
    config["devices"] = ["metal"]
    plan = ProbePlan.from_config(config, REPO)
    assert ProbeKey("one", "torch", "f64", "cpu") in plan.jobs()
    again = ProbePlan.from_params(plan.to_params())
    assert again.jobs() == plan.jobs() and again.probe("one").hash == plan.probe("one").hash


def test_plan_default_folder_and_disabling():
    config = load_config()
    assert set(ProbePlan.from_config(config, REPO).probes) == {
        p.stem for p in PROBES.glob("*.yaml")
    }
    config["probes"] = {"select": ["conv2d_grad"]}
    assert list(ProbePlan.from_config(config, REPO).probes) == ["conv2d_grad"]
    config["probes"] = {"enabled": False}
    plan = ProbePlan.from_config(config, REPO)
    assert plan.jobs() == [] and plan.outputs() == []


def test_plan_names_probe_files_relative_to_the_working_directory(tmp_path):
    # A job's input names its probe file: relative to the working directory, so that a copy
    # of the project (with results/ and .snakemake/) keeps every job's input set.
    config = load_config()
    config["probes"] = {"select": ["conv2d_grad"]}
    plan = ProbePlan.from_config(config, REPO, workdir=REPO)
    assert plan.path("conv2d_grad") == "probes/conv2d_grad.yaml"
    work = tmp_path / "work"
    plan = ProbePlan.from_config(config, REPO, workdir=work)
    path = plan.path("conv2d_grad")
    assert not path.startswith("/") and (work / path).resolve() == PROBES / "conv2d_grad.yaml"


# ----- the result schema ------------------------------------------------------------------


def _conv1d_probe(tmp_path, **case_over):
    doc = copy.deepcopy(CONV1D)
    doc["cases"]["batch2"].update(case_over)
    return load(write_probe(tmp_path, "conv", doc))


META = {"framework_version": "test", "host": "h", "runner": {}}


def test_results_round_trip_with_every_status(tmp_path):
    probe = _conv1d_probe(tmp_path)
    key = ProbeKey("conv", "candle", "f32", "cpu")
    outcomes = [
        Outcome.ok("batch2", "loss", np.float32(-84.0), ()),
        Outcome.missing_gradient("batch2", "w.grad"),
    ]
    path = tmp_path / "r.parquet"
    write_results(path, probe, key, outcomes, META)
    meta, got = read_results(path, probe, key)
    assert meta["probe_hash"] == probe.hash and meta["framework"] == "candle"
    assert got[("batch2", "loss")].values.tolist() == [-84.0]
    assert got[("batch2", "loss")].shape == ()
    assert got[("batch2", "w.grad")].status == verdicts.MISSING_GRADIENT
    with pytest.raises(ProbeResultError, match="'dtype' is 'f32', expected 'f64'"):
        read_results(path, probe, ProbeKey("conv", "candle", "f64", "cpu"))
    # An op the framework's API lacks: rows without values, with the reason.
    key = ProbeKey("conv", "burn", "f32", "cpu")
    why = "contiguous: burn's tensor API has no contiguous copy"
    outcomes = [Outcome.unsupported("batch2", q, why) for q in ("loss", "w.grad")]
    write_results(path, probe, key, outcomes, META)
    _, got = read_results(path, probe, key)
    assert got[("batch2", "w.grad")].status == verdicts.UNSUPPORTED
    assert got[("batch2", "w.grad")].values is None
    assert got[("batch2", "w.grad")].message == why


def test_results_refuse_missing_rows_and_wrong_sizes(tmp_path):
    probe = _conv1d_probe(tmp_path)
    key = ProbeKey("conv", "torch", "f32", "cpu")
    with pytest.raises(ProbeResultError, match=r"'w\.grad'\) is missing"):
        write_results(
            tmp_path / "r.parquet", probe, key, [Outcome.ok("batch2", "loss", [1], ())], META
        )
    bad = [Outcome.ok("batch2", "loss", [1, 2], ()), Outcome.ok("batch2", "w.grad", [0] * 6, (6,))]
    with pytest.raises(ProbeResultError, match="2 values for shape"):
        write_results(tmp_path / "r.parquet", probe, key, bad, META)
    assert not (tmp_path / "r.parquet").exists()


# ----- judging ----------------------------------------------------------------------------


def _judge(tmp_path, values, framework="candle", status=None, **case_over):
    probe = _conv1d_probe(tmp_path, **case_over)
    key = ProbeKey("conv", framework, "f32", "cpu")
    if status == verdicts.MISSING_GRADIENT:
        outcome = Outcome.missing_gradient("batch2", "w.grad")
    elif status == verdicts.FRAMEWORK_ERROR:
        outcome = Outcome.error("batch2", "w.grad", "RuntimeError: boom")
    elif status == verdicts.UNSUPPORTED:
        outcome = Outcome.unsupported("batch2", "w.grad", "no such op")
    else:
        outcome = Outcome.ok("batch2", "w.grad", values, (2, 1, 3))
    reference = Outcome.ok("batch2", "w.grad", RIGHT, (2, 1, 3))
    return judge_probe_row(probe, key, outcome, None if key.is_reference else reference)


RIGHT = [340, 392, 444, 484, 568, 652]
WRONG = [220, 256, 292, 508, 608, 708]
BUG = {"candle": {"cpu": {"w.grad": WRONG}}}


def test_judge_against_the_reference_run_and_exact_values(tmp_path):
    assert _judge(tmp_path, RIGHT).verdict == verdicts.PASS
    assert _judge(tmp_path, RIGHT).message == ""
    j = _judge(tmp_path, WRONG)
    assert (j.verdict, j.worst, j.reference) == (verdicts.FAIL, 152.0, "torch f32 cpu")
    # The note is closeness's mismatch message, located in the quantity's row-major layout.
    assert j.message == (
        "mismatched elements: 6 / 6 (100.0%), greatest absolute difference: 152 at "
        "w.grad[2] (up to 0 allowed)"
    )
    assert _judge(tmp_path, RIGHT, framework="torch").verdict == verdicts.REFERENCE
    # With exact values, PyTorch on the CPU is judged too.
    j = _judge(tmp_path, WRONG, framework="torch", exact={"w.grad": RIGHT})
    assert (j.verdict, j.reference) == (verdicts.FAIL, "exact")


def test_judge_known_bugs_reproduced_and_fixed(tmp_path):
    assert _judge(tmp_path, WRONG, known_bug=BUG).verdict == verdicts.KNOWN_BUG
    assert _judge(tmp_path, RIGHT, known_bug=BUG).verdict == verdicts.KNOWN_BUG_FIXED
    other = [0, 0, 0, 0, 0, 0]
    assert _judge(tmp_path, other, known_bug=BUG).verdict == verdicts.FAIL
    # A known bug of another device does not apply.
    metal = {"candle": {"metal": {"w.grad": WRONG}}}
    assert _judge(tmp_path, WRONG, known_bug=metal).verdict == verdicts.FAIL


def test_judge_a_known_bug_of_wrong_values_whatever_they_are(tmp_path):
    # For a bug whose values change from run to run (a read past a buffer's end).
    bug = {"candle": {"cpu": {"w.grad": "wrong-values"}}}
    for values in (WRONG, [0, 1, 2, 3, 4, 5], [340, 392, 444, 484, 568, 5.4e-153]):
        assert _judge(tmp_path, values, known_bug=bug).verdict == verdicts.KNOWN_BUG
    nan = [340, math.nan, 444, 484, 568, 652]
    assert _judge(tmp_path, nan, known_bug=bug).verdict == verdicts.KNOWN_BUG
    assert _judge(tmp_path, RIGHT, known_bug=bug).verdict == verdicts.KNOWN_BUG_FIXED
    # An error is not wrong values.
    j = _judge(tmp_path, None, status=verdicts.FRAMEWORK_ERROR, known_bug=bug)
    assert j.verdict == verdicts.FRAMEWORK_ERROR


def test_a_known_bug_in_some_releases_only(tmp_path):
    probe = _conv1d_probe(tmp_path, known_bug={"candle": {"versions": ["0.11.0"], **BUG["candle"]}})
    reference = Outcome.ok("batch2", "w.grad", RIGHT, (2, 1, 3))

    def verdict(version, values=WRONG):
        key = ProbeKey("conv", "candle", "f32", "cpu", "" if version == "0.11.0" else version)
        got = Outcome.ok("batch2", "w.grad", values, (2, 1, 3))
        return judge_probe_row(probe, key, got, reference, release=version).verdict

    assert verdict("0.11.0") == verdicts.KNOWN_BUG
    assert verdict("0.11.0", RIGHT) == verdicts.KNOWN_BUG_FIXED
    # A release the bug does not name is held to the reference alone.
    assert verdict("0.11.1", RIGHT) == verdicts.PASS
    assert verdict("0.11.1") == verdicts.FAIL


def test_judge_outcomes_without_values(tmp_path):
    j = _judge(tmp_path, None, status=verdicts.MISSING_GRADIENT)
    assert j.verdict == verdicts.MISSING_GRADIENT and j.worst is None
    j = _judge(tmp_path, None, status=verdicts.FRAMEWORK_ERROR)
    assert j.verdict == verdicts.FRAMEWORK_ERROR and j.message == "RuntimeError: boom"
    j = _judge(tmp_path, [340, math.nan, 444, 484, 568, math.inf])
    assert j.verdict == verdicts.NON_FINITE and j.worst == math.inf
    assert j.message.startswith(
        "mismatched elements: 2 / 6 (33.3%), greatest absolute difference: inf at w.grad[1]"
    )
    # Unsupported is accepted (the framework's API lacks the op) and says whose API.
    j = _judge(tmp_path, None, framework="burn", status=verdicts.UNSUPPORTED)
    assert (j.verdict, j.message) == (verdicts.UNSUPPORTED, "not supported by burn: no such op")
    assert j.worst is None and j.reference_values is None
    # Even where the probe records a known bug for the framework.
    j = _judge(tmp_path, None, framework="candle", status=verdicts.UNSUPPORTED, known_bug=BUG)
    assert j.verdict == verdicts.UNSUPPORTED


def test_judge_values_of_another_size_have_no_difference(tmp_path):
    # closeness refuses arrays of different sizes; the row says so and fails.
    j = _judge(tmp_path, [340, 392])
    assert j.verdict == verdicts.FAIL and math.isnan(j.worst)
    assert j.message == "2 values where the reference has 6"


@pytest.mark.parametrize(
    ("verdict", "ok"),
    [
        (verdicts.REFERENCE, True),
        (verdicts.KNOWN_BUG, True),
        (verdicts.KNOWN_BUG_FIXED, False),
        (verdicts.MISSING_GRADIENT, False),
        (verdicts.FRAMEWORK_ERROR, False),
        (verdicts.NON_FINITE, False),
        (verdicts.UNSUPPORTED, True),
    ],
)
def test_probe_verdicts_and_the_check(verdict, ok):
    assert verdicts.meets_expectation(verdict) is ok


def test_table_number_format():
    assert number(340.0) == "340" and number(-84.0) == "-84"
    assert number(0.1) == "0.1" and number(math.inf) == "inf" and number(math.nan) == "nan"
    assert values_text([1.0, 2.5, 3.0]) == "[1, 2.5, 3]"
    assert values_text(list(range(10)), limit=3) == "[0, 1, 2, … (10 values)]"
    assert values_text(None) == ""
