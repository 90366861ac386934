"""Diagnosis maths: ULP, RMSE, signed errors, the fp64 rule, localisation, ReLU flips."""

import json
import logging
import math
import os
import re

import numpy as np
import pytest

from parity.compare import activations, closeness, diagnosis
from parity.compare import job as compare_jobs
from parity.compare import maths as compare
from parity.core.fileio import sha256_file
from parity.plan.plan import Plan
from parity.render import tables
from parity.trace import fixtures
from parity.trace.reader import TraceReader

from conftest import write_trace


def f32(*v):
    return np.array(v, np.float32)


def test_ulp_distance_counts_representable_numbers_between():
    one = np.float32(1)
    three_up = np.nextafter(np.nextafter(np.nextafter(one, 2), 2), 2)
    assert diagnosis.max_ulp({"p": f32(1.0)}, {"p": np.array([three_up])}, ["p"]) == 3
    assert diagnosis.max_ulp({"p": f32(0.0)}, {"p": f32(-0.0)}, ["p"]) == 0
    tiny = np.float32(1e-45)  # smallest float32 subnormal
    assert diagnosis.max_ulp({"p": np.array([tiny])}, {"p": np.array([-tiny])}, ["p"]) == 2
    d = np.array([1.0])
    assert diagnosis.max_ulp({"p": d}, {"p": np.nextafter(d, 2)}, ["p"]) == 1
    assert math.isnan(diagnosis.max_ulp({"p": f32(1.0)}, {"p": f32(np.nan)}, ["p"]))
    with pytest.raises(TypeError):
        diagnosis.max_ulp({"p": f32(1.0)}, {"p": np.array([1.0])}, ["p"])


def test_ulp_at_the_largest_difference():
    a = {"w": f32(1.0, 100.0)}
    b = {"w": np.array([np.nextafter(np.float32(1), 2), np.float32(100.0)], np.float32)}
    at = closeness.max_abs_diff(a, b, ["w"])
    assert at.where == "w[0]" and diagnosis.ulp_at(a, b, at) == 1


def test_rmse_over_all_tensors():
    a = {"x": np.array([0.0, 0.0]), "y": np.array([0.0, 0.0])}
    b = {"x": np.array([1.0, -1.0]), "y": np.array([1.0, 1.0])}
    assert diagnosis.rmse(a, b, ["x", "y"]) == 1.0


def test_signed_errors_agree_when_both_runs_round_alike():
    r64 = {"w": np.array([1.0, 2.0, 3.0])}
    r32 = {"w": np.array([1.0, 2.0 + 1e-7, 3.0])}
    c32 = {"w": np.array([1.0, 2.0 + 1e-7, 3.0 - 1e-9])}
    a = diagnosis.error_agreement(r32, r64, c32, r64, ["w"])
    assert a.same and a.ref.where == a.cand.where == "w[1]" and a.ref.value > 0
    assert a.max_diff == pytest.approx(1e-9)
    b = diagnosis.error_agreement(r32, r64, {"w": np.array([1.0, 2.0 - 1e-7, 3.0])}, r64, ["w"])
    assert not b.same  # same place, opposite sign
    assert b.corr == pytest.approx(-1.0)


def test_fp64_rule_compares_distances_to_the_float64_run():
    r64 = {"w": np.zeros(4)}
    r32 = {"w": np.full(4, 1e-7)}
    close = diagnosis.fp64_rule(r32, {"w": np.full(4, 2.9e-7)}, r64, ["w"], "auto", 0.0)
    far = diagnosis.fp64_rule(r32, {"w": np.full(4, 3.1e-7)}, r64, ["w"], "auto", 0.0)
    assert close.multiplier == 3.0  # fewer than 1000 elements: TorchDynamo's 3
    assert close.passed and not far.passed
    assert far.ratio == pytest.approx(3.1)
    assert closeness.fp64_rule_multiplier(5000, "auto") == 2.0
    assert closeness.fp64_rule_multiplier(10, 4) == 4.0


def test_f64_rounding_threshold_scales_f32_drift_by_the_roundoff_ratio():
    assert diagnosis.f64_rounding_threshold(2.0**-24, 1.0) == 2.0**-53
    assert diagnosis.f64_rounding_threshold(1e-6, 1000) == pytest.approx(1.8626e-12, rel=1e-4)


def test_mlp_preactivations_in_float64():
    model = {"family": "mlp", "sizes": [2, 3, 1], "activation": "relu"}
    p = {
        "fc1.weight": f32(1, 0, 0, 1, 1, 1),
        "fc1.bias": f32(0, -1, 0),
        "fc2.weight": f32(1, 1, 1),
        "fc2.bias": f32(0),
    }
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    z = activations.preactivations(model, p, x)["fc1"]
    assert z.tolist() == [[1.0, 1.0, 3.0], [-1.0, -0.5, -0.5]]
    assert activations.active_counts(model, p, x)["fc1"].tolist() == [1, 1, 1]


def test_cnn_preactivations_match_a_direct_convolution():
    model = {
        "family": "cnn1d",
        "in_channels": 1,
        "channels": 2,
        "kernel": 3,
        "length": 6,
        "classes": 2,
        "activation": "relu",
    }
    w = np.array([[[1.0, -1.0, 2.0]], [[0.5, 0.25, -2.0]]])
    p = {
        "conv.weight": w.ravel(),
        "conv.bias": np.zeros(2),
        "fc.weight": np.zeros(16),
        "fc.bias": np.zeros(2),
    }
    x = np.arange(12.0).reshape(2, 1, 6)
    z = activations.preactivations(model, p, x)["conv"]
    want = np.array(
        [
            [
                [sum(x[b, 0, t + j] * w[o, 0, j] for j in range(3)) for t in range(4)]
                for o in range(2)
            ]
            for b in range(2)
        ]
    )
    assert np.array_equal(z, want)


# ----- a crafted case where the flip step and the divergence step are known -----------

HAND = {
    "devices": ["cpu"],
    "dtypes": ["f32", "f64"],
    "tolerance": 1e-6,
    "experiments": {
        "hand": {
            "model": {"family": "mlp", "sizes": [1, 1, 1], "activation": "relu"},
            "loss": "mse",
            "data": {"seed": 0, "batches": 1, "batch_size": 3},
            "optimizer": {"name": "sgd", "lr": 0.1},
            "steps": 4,
        }
    },
}


def _relu_flip_case(tmp_path):
    """The hand-made case of a known ReLU flip: (plan, fixture, the four traces by role)."""
    plan = Plan(HAND)
    fixture = tmp_path / "hand.safetensors"
    fixtures.save(fixture, {"x": np.array([[[-1.0], [0.5], [2.0]]], np.float32)}, {})
    sha = sha256_file(fixture)
    # Both runs: fc1.weight = 1. Reference bias stays 0 (samples 0.5 and 2 active).
    # Candidate bias drops to -0.6 after step 2, so in the forward pass of step 3 the
    # sample 0.5 is no longer active: the flip is at step 3, unit fc1[0], counts 2 vs 1.
    # Its f64 run carries the same change, so f64 vs f64 leaves rounding at step 2 too.
    ref_b = [0.0, 0.0, 0.0, 0.0, 0.0]
    cand_b = [0.0, 0.0, -0.6, -0.6, -0.6]

    def steps(bias):
        return [
            {"fc1.weight": [1.0], "fc1.bias": [b], "fc2.weight": [1.0], "fc2.bias": [0.0]}
            for b in bias
        ]

    paths = {}
    for side, run, bias in (("ref", "torch", ref_b), ("cand", "candle", cand_b)):
        for dt in ("f32", "f64"):
            paths[f"{side}{dt[1:]}"] = write_trace(
                tmp_path / f"{run}-{dt}.parquet",
                steps(bias),
                dtype=dt,
                experiment="hand",
                run=run,
                framework=run,
                fixture_sha256=sha,
                config_hash=plan.config_hash("hand", run),
                shapes={
                    "fc1.weight": (1, 1),
                    "fc1.bias": (1,),
                    "fc2.weight": (1, 1),
                    "fc2.bias": (1,),
                },
            )
    return plan, fixture, paths


def _float64_outputs(tmp_path):
    """Where the float64 job writes each table: ``s.*`` the split, ``d.*`` the diagnosis."""
    return {
        kind: {ext: str(tmp_path / f"{kind[0]}.{ext}") for ext in compare_jobs.FLOAT64_OUTPUTS}
        for kind in ("split", "diagnosis")
    }


def _perstep_and_float64(tmp_path, figure=()):
    """The per-step job (drawing its figure to ``figure``) and the float64 job (the split
    and the diagnosis, both figures) of the hand-made case: their results."""
    plan, fixture, paths = _relu_flip_case(tmp_path)
    job = plan.comparison_job(plan.comparison("hand", "cpu"))
    log = logging.getLogger("test")
    perstep = compare_jobs.perstep_job(
        job,
        paths["ref32"],
        paths["cand32"],
        str(fixture),
        tmp_path / "p.csv",
        tmp_path / "p.md",
        tmp_path / "p.json",
        log,
        figure=figure,
    )
    results = compare_jobs.float64_job(
        job,
        paths,
        str(fixture),
        str(tmp_path / "p.json"),
        _float64_outputs(tmp_path),
        log,
    )
    return perstep, results


def test_the_compare_job_writes_every_table_of_its_outputs(tmp_path):
    """compare(), as the rules call it: with the float64 outputs (rule compare) the three
    tables, each with its figure; without (rule perstep) the per-step table alone."""
    plan, fixture, paths = _relu_flip_case(tmp_path)
    job = plan.comparison_job(plan.comparison("hand", "cpu"))
    log = logging.getLogger("test")
    perstep = {k: str(tmp_path / f"p.{k}") for k in ("csv", "md", "png", "svg")}
    perstep["result"] = str(tmp_path / "p.json")
    float64 = {
        f"{kind}_{k}": v
        for kind, files in _float64_outputs(tmp_path).items()
        for k, v in files.items()
    }
    both = compare_jobs.compare(job, paths, str(fixture), {**perstep, **float64}, log)
    assert list(both) == ["perstep", "split", "diagnosis"]
    assert both["diagnosis"]["relu_flip_step"] == 3
    for path in [*perstep.values(), *float64.values()]:
        assert os.path.getsize(path) > 0, path
    alone = tmp_path / "alone"
    outputs = {k: str(alone / os.path.basename(v)) for k, v in perstep.items()}
    f32 = {k: paths[k] for k in ("ref32", "cand32")}
    only = compare_jobs.compare(job, f32, str(fixture), outputs, log)
    assert list(only) == ["perstep"] and only["perstep"]["tol_exceeded_step"] == 2
    assert sorted(os.listdir(alone)) == ["p.csv", "p.html", "p.json", "p.md", "p.png", "p.svg"]


def test_relu_flip_and_f64_divergence_are_located_at_the_known_step(tmp_path):
    perstep, results = _perstep_and_float64(tmp_path)
    assert perstep["tol_exceeded_step"] == 2
    out = results["diagnosis"]
    assert out["relu_flip_step"] == 3
    assert out["relu_flip_unit"] == "fc1[0]"
    assert out["relu_flip_counts"] == "2 vs 1"
    assert out["relu_flip64_step"] == 3
    assert out["tol_exceeded_step"] == 2 and out["tol_exceeded_where"] == "fc1.bias[0]"
    assert out["f64_divergence_step"] == 2 and out["f64_divergence_where"] == "fc1.bias[0]"
    assert out["fp64_rule_verdict"] == "fail"
    assert "step 3, unit `fc1[0]`, active samples 2 vs 1" in (tmp_path / "d.md").read_text()


def test_the_float64_job_reads_once_and_writes_the_split_of_compare_split(tmp_path):
    """The float64 job takes its split from the diagnosis pass over the four traces
    (``diagnosis.float64_tables``); its CSV is the one ``compare.split``'s rows give, and the
    traces are each read once."""
    _perstep_and_float64(tmp_path)
    run = {"ref": "torch", "cand": "candle"}
    readers = [
        TraceReader(tmp_path / f"{run[k[:-2]]}-f{k[-2:]}.parquet") for k in compare_jobs.SPLIT_ROLES
    ]
    expected = tables.csv_text(compare.split(*readers), tables.SPLIT_COLUMNS)
    assert (tmp_path / "s.csv").read_text() == expected

    reads = []
    original = TraceReader.iter_steps

    def counted(self, *a, **k):
        reads.append(self.path)
        return original(self, *a, **k)

    (tmp_path / "counted").mkdir()
    plan, fixture, paths = _relu_flip_case(tmp_path / "counted")
    job = plan.comparison_job(plan.comparison("hand", "cpu"))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(TraceReader, "iter_steps", counted)
        compare_jobs.float64_job(
            job,
            paths,
            str(fixture),
            str(tmp_path / "p.json"),
            _float64_outputs(tmp_path / "counted"),
            logging.getLogger("test"),
        )
    assert sorted(map(str, reads)) == sorted(str(paths[k]) for k in compare_jobs.SPLIT_ROLES)


#: Every legend label a comparison figure can have (the start of each).
LABELS = (
    "max|ref32 − cand32|",
    "|dloss|",
    "max|ref32 − ref64|",
    "max|cand32 − cand64|",
    "max|ref64 − cand64|",
    "float64 rounding threshold",
    "RMSE(ref32 − cand32)",
    "1 float32 ULP at max|θ|",
    "f32 exceeds tolerance (step 2)",
    "f64 leaves rounding (step 2)",
    "ReLU flip fc1[0] (step 3)",
)


def _legend(svg_path) -> list[str]:
    """The texts of a figure's SVG, from matplotlib's ``<!-- text -->`` comments (it draws
    each text as glyph paths and names it in a comment)."""
    return re.findall(r"<!-- (.*?) -->", svg_path.read_text(encoding="utf-8"))


def test_the_comparison_jobs_draw_each_table_with_its_columns_and_markers(tmp_path):
    """The per-step and float64 jobs draw their figures from the rows they computed: the
    lines of each table's columns (figures.COMPARISON_COLUMNS, a legend label may add how
    many steps are exactly 0), the tolerance, the float32 rounding level and, on the
    diagnosis, the steps it found."""
    png, svg = tmp_path / "p.png", tmp_path / "p.svg"
    _, results = _perstep_and_float64(tmp_path, figure=[str(png), str(svg)])
    assert png.read_bytes().startswith(b"\x89PNG") and (tmp_path / "s.png").stat().st_size

    def lines(path):
        texts = _legend(path)
        return {label for label in LABELS if any(t.startswith(label) for t in texts)}, texts

    perstep, texts = lines(svg)
    assert "hand perstep cpu" in texts and "tolerance 1e-06" in texts
    assert perstep == {"max|ref32 − cand32|", "|dloss|", "1 float32 ULP at max|θ|"}, texts
    split, texts = lines(tmp_path / "s.svg")
    assert "hand split cpu" in texts and "tolerance 1e-06" in texts
    assert split == {
        "max|ref32 − cand32|",
        "max|ref32 − ref64|",
        "max|cand32 − cand64|",
        "max|ref64 − cand64|",
        "1 float32 ULP at max|θ|",
    }, texts
    diagnosis, texts = lines(tmp_path / "d.svg")
    assert "hand diagnosis cpu" in texts and "tolerance 1e-06" in texts
    assert diagnosis == {
        "max|ref32 − cand32|",
        "max|ref64 − cand64|",
        "float64 rounding threshold",
        "RMSE(ref32 − cand32)",
        "1 float32 ULP at max|θ|",
        "f32 exceeds tolerance (step 2)",
        "f64 leaves rounding (step 2)",
        "ReLU flip fc1[0] (step 3)",
    }, texts
    assert results["split"]["kind"] == "split"


def test_perstep_job_of_a_diverged_run_reports_inf_and_stores_null(tmp_path):
    # The candidate's bias is NaN from step 3: closeness counts it +inf against the
    # reference's finite value; the JSON result stores the non-finite worst as null.
    plan = Plan(HAND)
    fixture = tmp_path / "hand.safetensors"
    fixtures.save(fixture, {"x": np.array([[[-1.0], [0.5], [2.0]]], np.float32)}, {})
    paths = {}
    for run, bias in (("torch", [0.0] * 5), ("candle", [0.0, 0.0, 0.0, np.nan, np.nan])):
        paths[run] = write_trace(
            tmp_path / f"{run}.parquet",
            [
                {"fc1.weight": [1.0], "fc1.bias": [b], "fc2.weight": [1.0], "fc2.bias": [0.0]}
                for b in bias
            ],
            experiment="hand",
            run=run,
            framework=run,
            fixture_sha256=sha256_file(fixture),
            config_hash=plan.config_hash("hand", run),
            shapes={"fc1.weight": (1, 1), "fc1.bias": (1,), "fc2.weight": (1, 1), "fc2.bias": (1,)},
        )
    comp = plan.comparison("hand", "cpu")
    out = compare_jobs.perstep_job(
        plan.comparison_job(comp),
        str(paths["torch"]),
        str(paths["candle"]),
        str(fixture),
        tmp_path / "p.csv",
        tmp_path / "p.md",
        tmp_path / "p.json",
        logging.getLogger("test"),
    )
    assert (out["worst_dparam"], out["worst_step"], out["worst_where"]) == (None, 3, "fc1.bias[0]")
    assert out["verdict"] == "fail" and "diverged at step 3" in out["status"]
    assert json.loads((tmp_path / "p.json").read_text())["final_dparam"] is None
    assert "worst max|dparam| inf at step 3 (`fc1.bias[0]`)" in (tmp_path / "p.md").read_text()
    assert (tmp_path / "p.csv").read_text().splitlines()[4].endswith(",inf,fc1.bias[0]")
