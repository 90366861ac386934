"""End-to-end: tests/probes/ops/accumulation.yaml (gradient accumulation over micro-steps,
micro-batches, and the gradient transforms scale, clip_value, clip_norm and replace) through
the real workflow with PyTorch, candle and burn on the CPU. Every framework meets every exact
value in float32 and float64, and the biting clip_norm, which has no exact values, matches
PyTorch within the file's tolerance. (test_probe_ops_workflow.py runs this file too, with
the rest of the folder.)"""

import csv

import pytest

from conftest import REPO, load_config, run_workflow

pytestmark = pytest.mark.workflow

TABLE = "results/tables/probes.csv"
ACCEPTED = {"pass", "reference", "known-bug", "unsupported"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("accumulation")
    config = load_config()
    config["candle"]["versions"] = ["0.11.0"]
    config["burn"]["versions"] = ["0.22.1"]
    config["probes"].update(
        folder=str(REPO / "tests/probes/ops"),
        select=["accumulation"],
        dtypes=["f32", "f64", "f16", "bf16"],
    )
    run_workflow(workdir, config, "--cores", "2", TABLE)
    with open(workdir / TABLE, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_verdict_is_accepted(rows):
    bad = [
        (r["case"], r["quantity"], r["framework"], r["dtype"], r["verdict"], r["note"])
        for r in rows
        if r["verdict"] not in ACCEPTED
    ]
    assert not bad


@pytest.mark.parametrize("framework", ["torch", "candle", "burn"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_every_framework_meets_the_exact_values(rows, framework, dtype):
    exact = [
        r
        for r in rows
        if (r["framework"], r["dtype"], r["reference"]) == (framework, dtype, "exact")
    ]
    assert len(exact) == 21
    assert {r["verdict"] for r in exact} == {"pass"}


@pytest.mark.parametrize("framework", ["candle", "burn"])
def test_the_global_norm_clip_matches_pytorch(rows, framework):
    for dtype in ("f32", "f64"):
        for q in ("a.grad", "b.grad", "a.after_step", "b.after_step"):
            (r,) = [
                r
                for r in rows
                if (r["case"], r["quantity"], r["framework"], r["dtype"])
                == ("clip_norm_biting", q, framework, dtype)
            ]
            assert r["verdict"] == "pass", r


def test_micro_step_quantities_are_stacked_inside_the_steps(rows):
    for fw in ("torch", "candle", "burn"):
        shapes = {
            r["quantity"]: r["shape"]
            for r in rows
            if (r["case"], r["framework"], r["dtype"]) == ("micro_batches_averaged", fw, "f32")
        }
        assert shapes == {
            "loss": "[2, 2]",
            "x": "[2, 2, 4]",
            "y": "[2, 2, 4]",
            "p.grad": "[2, 4]",
            "p.after_step": "[2, 4]",
        }, fw
