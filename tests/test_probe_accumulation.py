"""Gradient accumulation and gradient transforms in the probe language: the normalized form,
the shapes of the compared quantities, the refusals at load (naming the case and the key),
and PyTorch's run of tests/probes/ops/accumulation.yaml against its exact values."""

import copy

import numpy as np
import pytest
import yaml

from parity.probe.format import ProbeError
from parity.probe.loader import load

from conftest import REPO

OPS = REPO / "tests" / "probes" / "ops"

DOC = {
    "description": "accumulation",
    "inputs": {
        "p": {"values": [1, -2], "requires_grad": True},
        "q": {"values": [[0.5]], "requires_grad": True},
        "xs": {"values": [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]},
    },
    "cases": {
        "c": {
            "steps": [{"mul": {"in": ["p", "x"], "out": "y"}}],
            "loss": [{"sum": "y"}, {"sum_squares": "q"}],
            "optimizer": {
                "sgd": {"lr": 0.5},
                "steps": 2,
                "accumulate": 3,
                "micro_batches": {"x": "xs"},
                "grad": [
                    {"scale": 0.25},
                    {"clip_norm": 2},
                    {"clip_value": 1},
                    {"replace": {"q": {"fill": 3}}},
                ],
            },
            "compare": ["loss", "x", "y", "p.grad", "q.grad", "p.after_step"],
        }
    },
}


def _load(tmp_path, doc, name="acc"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load(path)


def test_the_loop_keys_are_normalized_and_reach_the_runners(tmp_path):
    p = _load(tmp_path, DOC)
    case = p.case("c")
    assert case["optimizer_steps"] == 2 and case["accumulate"] == 3
    assert case["micro_batches"] == [{"name": "x", "input": "xs"}]
    assert case["grad_transforms"] == [
        {"kind": "scale", "factor": 0.25},
        {"kind": "clip_norm", "max_norm": 2.0},
        {"kind": "clip_value", "clip_value": 1.0},
        {"kind": "replace", "input": "q", "values": [3.0]},
    ]
    sent = p.runner_spec("f32", "cpu")["cases"][0]
    assert sent["accumulate"] == 3 and sent["grad_transforms"] == case["grad_transforms"]
    # the loss and forward values per micro-step ([steps, k, ...]), the rest per step
    assert p.quantity_shapes(case) == {
        "loss": ([2, 3], "float"),
        "x": ([2, 3, 2], "float"),
        "y": ([2, 3, 2], "float"),
        "p.grad": ([2, 2], "float"),
        "q.grad": ([2, 1, 1], "float"),
        "p.after_step": ([2, 2], "float"),
    }


def test_a_case_without_the_loop_keys_has_their_defaults(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["cases"]["c"]["optimizer"] = {"sgd": {"lr": 0.5}}
    doc["cases"]["c"]["steps"] = []
    doc["cases"]["c"]["loss"] = {"sum_squares": "q"}
    doc["cases"]["c"]["compare"] = ["loss", "q.grad"]
    case = _load(tmp_path, doc).case("c")
    assert (case["accumulate"], case["micro_batches"], case["grad_transforms"]) == (1, [], [])
    assert _load(tmp_path, doc).quantity_shapes(case)["loss"] == ([], "float")


def _set(path, value):
    def edit(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


OPT = ("cases", "c", "optimizer")
MB = "cases.c.optimizer.micro_batches"
G0 = "cases.c.optimizer.grad[0]"


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (_set((*OPT, "accumulate"), 2), f"{MB}.x", "2·2 = 4 rows"),
        (_set((*OPT, "accumulate"), 0), "cases.c.optimizer.accumulate", "less than the minimum"),
        (_set((*OPT, "micro_batches"), {"p": "xs"}), f"{MB}.p", "taken"),
        (_set((*OPT, "micro_batches"), {"x": "p"}), f"{MB}.x", "data"),
        (_set((*OPT, "micro_batches"), {"x": "nope"}), f"{MB}.x", "not an input"),
        (
            _set((*OPT, "grad"), [{"replace": {"xs": [1]}}]),
            "cases.c.optimizer.grad[0].replace.xs",
            "not an input with requires_grad",
        ),
        (
            _set((*OPT, "grad"), [{"scale": 1}, {"replace": {"p": [1, 2, 3]}}]),
            "cases.c.optimizer.grad[1].replace.p",
            "3 values for a quantity of shape [2]",
        ),
        (_set((*OPT, "grad"), [{"clip_norm": 0}]), f"{G0}.clip_norm", "minimum"),
        (_set((*OPT, "grad"), [{"clip": 1}]), G0, ""),
        (
            _set((*OPT, "grad"), [{"scale": 1, "clip_value": 1}]),
            "cases.c.optimizer.grad[0]",
            "",
        ),
    ],
)  # fmt: skip
def test_refusals_name_the_case_and_the_key(tmp_path, edit, field, words):
    doc = copy.deepcopy(DOC)
    edit(doc)
    with pytest.raises(ProbeError) as e:
        _load(tmp_path, doc, "bad")
    assert e.value.field == field, str(e.value)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_torch_meets_the_exact_values_of_the_accumulation_probe(dtype):
    import logging

    from parity.probe.torch import run

    probe = load(OPS / "accumulation.yaml")
    checked = 0
    for o in run(probe, dtype, "cpu", 1, logging.getLogger("test")):
        case = probe.case(o.case)
        assert o.status == "ok", (o.case, o.quantity, o.status)
        shape = probe.quantity_shapes(case)[o.quantity][0]
        assert list(o.shape) == shape, (o.case, o.quantity)
        if o.quantity in case["exact"]:
            want = np.asarray(case["exact"][o.quantity]["values"], dtype=np.float64)
            assert np.array_equal(np.asarray(o.values), want), (o.case, o.quantity)
            checked += 1
    assert checked == 21


def test_torch_clips_by_the_global_norm_as_defined():
    """clip_norm_biting: sums of 2 micro-steps [6, 8] and [24] (total norm 26), max_norm
    6.5: every gradient times 6.5·(26 + 1e-6)⁻¹ in float64."""
    import logging

    from parity.probe.torch import run

    probe = load(OPS / "accumulation.yaml")
    out = {(o.case, o.quantity): o for o in run(probe, "f64", "cpu", 1, logging.getLogger("t"))}
    coef = (1 / (26 + 1e-6)) * 6.5
    got = np.asarray(out[("clip_norm_biting", "a.grad")].values)
    assert np.array_equal(got, np.array([6 * coef, 8 * coef] * 2))
    assert np.array_equal(np.asarray(out[("clip_norm_biting", "b.grad")].values), [24 * coef] * 2)


def test_micro_step_stacking_counts_against_the_tensor_limit(tmp_path):
    doc = {
        "description": "too many micro-steps",
        "inputs": {"p": {"zeros": [1000], "requires_grad": True}},
        "cases": {
            "c": {
                "steps": [],
                "loss": {"sum": "p"},
                "optimizer": {"sgd": {"lr": 1}, "accumulate": 1001},
                "compare": ["p"],
            }
        },
    }
    with pytest.raises(ProbeError) as e:
        _load(tmp_path, doc, "big")
    assert e.value.field == "cases.c.optimizer.accumulate", str(e.value)
    assert "stacked over 1 steps of 1001 micro-steps holds 1001000 elements" in str(e.value)
