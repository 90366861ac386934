"""The localisation walk (scripts/parity/localise/walk.py) on hand-made replay records whose
culprit is known, the choice of the replayed step (scripts/parity/localise/replay.py) and the job
(scripts/parity/localise/job.py)."""

import math
from pathlib import Path

import numpy as np
import pytest

from parity.core import models as localise_models
from parity.localise import job as localise_job
from parity.localise import replay
from parity.localise import walk as localise

MLP = {"family": "mlp", "sizes": [3, 5, 2], "activation": "relu"}
CNN = {
    "family": "cnn1d",
    "in_channels": 1,
    "channels": 2,
    "kernel": 3,
    "length": 6,
    "classes": 3,
    "fc_in": 8,
    "activation": "relu",
}
SETTINGS = localise.Settings()


def _records(model, batch, changed=(), f32_only=(), seed=0):
    """Four replay records of ``model``: a float64 truth per quantity, the float32 runs as
    its rounding (the candidate off by one float32 ULP in a few places, as a different
    summation order gives), the candidate's float64 within float64 rounding. Quantities in
    ``changed`` compute another formula on the candidate side (relative change 1e-4, in
    float64 too); in ``f32_only`` the candidate's float32 value is off by 1e-3 relative while
    its float64 value agrees (a precision loss only float32 shows)."""
    rng = np.random.default_rng(seed)
    out = {r: {} for r in localise.ROLES}
    for name, shape in localise.shapes(model, batch).items():
        n = int(np.prod(shape)) if shape else 1
        truth = rng.normal(size=n)
        cand = truth * (1 + 1e-4) if name in changed else truth * (1 + 1e-16 * rng.normal(size=n))
        out["ref64"][name] = truth
        out["cand64"][name] = cand
        out["ref32"][name] = truth.astype(np.float32)
        c32 = cand.astype(np.float32)
        flip = rng.random(n) < 0.2
        c32[flip] = np.nextafter(c32[flip], np.float32(np.inf))
        if name in f32_only:
            c32 = (cand * (1 + 1e-3)).astype(np.float32)
        out["cand32"][name] = c32
    return out


def _verdicts(w):
    return {r["quantity"]: r["verdict"] for r in w.rows}


def test_rounding_alone_finds_no_culprit():
    w = localise.walk(CNN, 4, _records(CNN, 4), {}, SETTINGS)
    assert w.culprit is None
    assert set(_verdicts(w).values()) == {"agrees"}


def test_the_kernel_gradient_is_the_culprit_and_its_update_downstream():
    # candle's conv1d: forward and loss agree, the kernel gradient differs, its update follows.
    rec = _records(CNN, 4, changed={"grad:conv.weight", "update:conv.weight"})
    w = localise.walk(CNN, 4, rec, {}, SETTINGS)
    assert (w.culprit, w.culprit_phase) == ("grad:conv.weight", "backward")
    v = _verdicts(w)
    assert v["update:conv.weight"] == "downstream"
    assert v["grad:conv.bias"] == v["update:conv.bias"] == v["loss"] == "agrees"


def test_an_upstream_difference_makes_every_later_one_downstream():
    # A transposed weight: the first layer's output differs, and so does everything computed
    # from it; none of those is a culprit of its own.
    later = [q.name for q in localise.quantities(MLP)]
    rec = _records(MLP, 4, changed=set(later))
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "fc1.out"
    v = _verdicts(w)
    assert [n for n, x in v.items() if x == "differs"] == ["fc1.out"]
    assert all(x == "downstream" for n, x in v.items() if n != "fc1.out")


def test_a_second_independent_difference_is_named_but_the_first_is_the_culprit():
    rec = _records(MLP, 4, changed={"grad:fc2.bias", "update:fc2.bias", "update:fc1.weight"})
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "grad:fc2.bias"
    v = _verdicts(w)
    assert v["update:fc2.bias"] == "downstream"
    # update:fc1.weight's gradient agrees: a difference of its own (the optimizer).
    assert v["update:fc1.weight"] == "differs"


def test_a_float32_only_difference_fails_the_fp64_referenced_rule():
    rec = _records(MLP, 4, f32_only={"loss"})
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "loss"
    row = next(r for r in w.rows if r["quantity"] == "loss")
    assert "float32" in row["note"] and "float64" not in row["note"]
    assert row["fp64_ratio"] > 3


def test_a_formula_difference_below_float32_rounding_is_seen_in_float64():
    # burn's float32 bias-correction factors: far below a float32 ULP of the update, but the
    # float64 replays compute different numbers.
    rec = _records(MLP, 4)
    for role, scale in (("cand64", 1 + 1e-9),):
        rec[role]["update:fc1.weight"] = rec["ref64"]["update:fc1.weight"] * scale
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "update:fc1.weight"
    row = next(r for r in w.rows if r["quantity"] == "update:fc1.weight")
    assert "float64" in row["note"]


def test_a_quantity_not_recorded_is_looked_through():
    rec = _records(
        MLP,
        4,
        changed={
            "grad:relu1.out",
            "grad:fc1.out",
            "grad:fc1.weight",
            "grad:fc1.bias",
            "update:fc1.weight",
            "update:fc1.bias",
        },
    )
    for r in rec.values():
        del r["grad:relu1.out"]
    missing = {"grad:relu1.out": "burn: not kept"}
    w = localise.walk(MLP, 4, rec, missing, SETTINGS)
    v = _verdicts(w)
    assert v["grad:relu1.out"] == "not recorded"
    # grad:fc1.out's recorded inputs (grad:fc2.out through the unrecorded one, fc1.out)
    # agree, so it is where the difference is first seen.
    assert w.culprit == "grad:fc1.out"
    assert v["grad:fc1.weight"] == "downstream"


def test_non_finite_candidate_differs():
    rec = _records(MLP, 4)
    rec["cand32"]["update:fc1.bias"] = np.full(5, np.nan, np.float32)
    rec["cand64"]["update:fc1.bias"] = np.full(5, np.nan)
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "update:fc1.bias"
    row = next(r for r in w.rows if r["quantity"] == "update:fc1.bias")
    assert row["max_abs_diff"] == math.inf


def test_without_float64_replays_a_difference_beyond_float32_rounding_is_found():
    # A run without float64 (a fused candle op): rounding alone passes, a parameter that
    # is never updated on one side (update 0 against a real update) is found.
    rec = _records(MLP, 4)
    del rec["ref64"], rec["cand64"]
    assert localise.walk(MLP, 4, rec, {}, SETTINGS).culprit is None
    rec["cand32"]["update:fc2.bias"] = np.zeros_like(rec["cand32"]["update:fc2.bias"])
    w = localise.walk(MLP, 4, rec, {}, SETTINGS)
    assert w.culprit == "update:fc2.bias"


def test_updates_are_exact_differences_of_float32_values():
    before = {"w": np.array([0.1, 0.2], np.float32)}
    after = {"after:w": np.array([0.1000001, 0.19], np.float32)}
    out = localise.derive_updates(after, before, ["w"])
    want = after["after:w"].astype(np.float64) - before["w"].astype(np.float64)
    assert out["update:w"].dtype == np.float64
    assert np.array_equal(out["update:w"], want)


def test_quantities_follow_dataflow_order():
    names = [q.name for q in localise.quantities(CNN)]
    assert names == [
        "conv.out",
        "relu.out",
        "fc.out",
        "loss",
        "grad:fc.out",
        "grad:fc.weight",
        "grad:fc.bias",
        "grad:relu.out",
        "grad:conv.out",
        "grad:conv.weight",
        "grad:conv.bias",
        "update:conv.weight",
        "update:conv.bias",
        "update:fc.weight",
        "update:fc.bias",
    ]
    assert localise.forward_names(MLP) == ["fc1.out", "relu1.out", "fc2.out", "loss"]


@pytest.mark.parametrize(
    ("perstep", "diagnosis", "setting", "want"),
    [
        ({"tol_exceeded_step": 7}, {"fp64_rule_first_fail": 3}, "auto", 7),
        ({"tol_exceeded_step": None}, {"fp64_rule_first_fail": 3}, "auto", 3),
        ({"tol_exceeded_step": None}, {"f64_divergence_step": 5}, "auto", 5),
        ({"tol_exceeded_step": None}, None, "auto", 1),
        ({"tol_exceeded_step": 7}, None, 2, 2),
    ],
)
def test_the_replayed_step(perstep, diagnosis, setting, want):
    assert replay.choose_step(perstep, diagnosis, setting)[0] == want


# ----- the job: a comparison that cannot be replayed gets a result saying why ----------


def _job(tmp_path, monkeypatch, config, experiment, comparison):
    """Plan.comparison_job of one comparison, a sealed per-step result that says it failed
    at step 1, and the fixture, in ``tmp_path`` (the working directory)."""
    from parity.core import integrity
    from parity.plan.plan import Plan
    from parity.trace import fixtures

    monkeypatch.chdir(tmp_path)
    plan = Plan(config)
    c = next(x for x in plan.comparisons() if (x.experiment, x.name) == (experiment, comparison))
    params = plan.comparison_job(c)
    fixtures.write(plan.fixture(experiment), plan.fixture_settings(experiment))
    perstep = tmp_path / "perstep.json"
    integrity.write_sealed_json(
        perstep, {"verdict": "fail", "tol_exceeded_step": 1, "kind": "perstep"}
    )
    out = {k: str(tmp_path / f"out.{k}") for k in ("csv", "md", "result")}
    out.update(png=str(tmp_path / "fig.png"), svg=str(tmp_path / "fig.svg"))
    return c, params, str(perstep), out


def _run_job(params, perstep, out, tmp_path):
    import logging

    from parity.core import integrity

    result = localise_job.localise(
        params, perstep, None, out, logging.getLogger("test"), str(tmp_path / "log")
    )
    assert result == integrity.read_sealed_json(out["result"])
    return result


def test_a_missing_runner_gives_a_result_not_a_crash(tmp_path, monkeypatch):
    from conftest import load_config

    config = load_config()
    _, params, perstep, out = _job(tmp_path, monkeypatch, config, "a3_sgd", "main")
    result = _run_job(params, perstep, out, tmp_path)  # no results/bin/candle-parity-0.11.0-cpu
    assert result["status"] == "not localised" and result["culprit"] is None
    assert "candle" in result["reason"]
    assert "not localised" in Path(out["md"]).read_text()
    # nothing to tabulate or draw: no CSV, no figure, and the record names neither
    assert not any(Path(out[k]).exists() for k in ("csv", "png", "svg"))
    assert set(result["tables"]) == {"md", "html"}


def test_an_imported_device_is_not_replayed(tmp_path, monkeypatch):
    from conftest import load_config

    config = load_config()
    config["devices"] = ["cpu", "cuda"]
    config["imported_devices"] = ["cuda"]
    config["reference_device"] = "same"
    c, params, perstep, out = _job(tmp_path, monkeypatch, config, "a3_sgd", "main")
    assert c.device == "cpu"  # the cpu comparison replays; take the cuda one instead
    plan_cuda = params["localise"]
    from parity.plan.plan import Plan

    cuda = next(
        x
        for x in Plan(config).comparisons()
        if (x.experiment, x.name, x.device) == ("a3_sgd", "main", "cuda")
    )
    params = Plan(config).comparison_job(cuda)
    assert plan_cuda["unreplayable"] is None
    result = _run_job(params, perstep, out, tmp_path)
    assert result["status"] == "not localised"
    assert "imported" in result["reason"]


def test_a_diverged_reference_state_is_refused(tmp_path):
    from parity.plan.keys import RunKey

    settings = {
        "model": MLP,
        "optimizer": {"name": "sgd", "lr": 0.1},
        "framework": "torch",
    }

    key = RunKey("e", "torch", "f32", "cpu")
    # k = 1 takes the fixture; a NaN there is a state that cannot be replayed either.
    from parity.trace import fixtures

    fx_settings = {"model": MLP, "loss": "mse", "data": {"seed": 1, "batches": 1, "batch_size": 4}}
    fx = fixtures.draw(fx_settings)
    fx["fc1.weight"][0, 0] = np.nan
    path = tmp_path / "fx.safetensors"
    fixtures.save(path, fx, fx_settings)
    with pytest.raises(replay.ReplayError, match="not finite"):
        replay.reference_state(key, settings, str(path), 1, str(tmp_path), 1, None, None)


def test_skip_reason():
    from parity.plan.keys import Comparison, RunKey

    ref, cand = RunKey("e", "torch", "f32", "cpu"), RunKey("e", "candle", "f32", "cpu")
    passing = Comparison("e", "main", "cpu", ref, cand, "pass", 1e-6, None)
    control = Comparison("e", "main", "cpu", ref, cand, "fail", 1e-6, None)
    assert "localise.all" in localise_job.skip_reason({"verdict": "pass"}, passing, False)
    assert localise_job.skip_reason({"verdict": "pass"}, passing, True) is None
    assert localise_job.skip_reason({"verdict": "fail"}, passing, False) is None
    assert localise_job.skip_reason({"verdict": "expected-fail"}, control, False) is None


def test_a_step_beyond_the_run_is_refused_with_a_result(tmp_path, monkeypatch):
    from conftest import load_config

    config = load_config()
    config["localise"] = {"step": 500}
    _, params, perstep, out = _job(tmp_path, monkeypatch, config, "a3_sgd", "main")
    result = _run_job(params, perstep, out, tmp_path)
    assert result["status"] == "not localised"
    assert (
        "step 500 (config localise.step) is beyond the experiment's 100 steps" in result["reason"]
    )


TRANSFORMER = {
    "family": "transformer",
    "vocab": 5,
    "d_model": 4,
    "heads": 2,
    "blocks": 2,
    "seq_len": 3,
}


def test_the_transformer_names_each_module_output_in_forward_order():
    """Every module output and named attention op, ``<module path>.out`` as a forward hook
    would name it, in forward order (the same list as parity-common's
    ``transformer_names_follow_the_module_paths_in_forward_order``), each parameter's
    gradient right after its module output's gradient."""
    block = [
        "ln1.out",
        "attn.q.out",
        "attn.k.out",
        "attn.v.out",
        "attn.scores.out",
        "attn.softmax.out",
        "attn.context.out",
        "attn.out.out",
        "ln2.out",
        "mlp.fc1.out",
        "mlp.gelu.out",
        "mlp.fc2.out",
    ]
    want = ["tok_emb.out", "pos_emb.out"]
    for i in range(2):
        want += [f"blocks.{i}.{n}" for n in block] + [f"blocks.{i}.out"]
    want += ["ln_f.out", "head.out", "loss"]
    assert localise.forward_names(TRANSFORMER) == want
    qs = localise.quantities(TRANSFORMER)
    order = [q.name for q in qs]
    assert order[: len(want)] == want
    # Backward: from the logits back, each module's parameters after its output's gradient.
    backward = [q.name for q in qs if q.phase == "backward"]
    assert backward[:3] == ["grad:head.out", "grad:head.weight", "grad:ln_f.out"]
    assert backward[5:11] == [
        "grad:blocks.1.out",
        "grad:blocks.1.mlp.fc2.out",
        "grad:blocks.1.mlp.fc2.weight",
        "grad:blocks.1.mlp.fc2.bias",
        "grad:blocks.1.mlp.gelu.out",
        "grad:blocks.1.mlp.fc1.out",
    ]
    assert backward[-4:] == [
        "grad:pos_emb.out",
        "grad:pos_emb.weight",
        "grad:tok_emb.out",
        "grad:tok_emb.weight",
    ]
    by = {q.name: q for q in qs}
    assert by["blocks.0.mlp.gelu.out"].inputs == ("blocks.0.mlp.fc1.out",)
    assert by["blocks.0.attn.context.out"].inputs == (
        "blocks.0.attn.softmax.out",
        "blocks.0.attn.v.out",
    )
    assert by["blocks.0.ln2.out"].inputs == ("tok_emb.out", "pos_emb.out", "blocks.0.attn.out.out")
    assert by["grad:blocks.1.mlp.fc1.out"].inputs == (
        "grad:blocks.1.mlp.gelu.out",
        "blocks.1.mlp.fc1.out",
    )
    assert by["grad:blocks.0.out"].inputs == (
        "grad:blocks.1.ln1.out",
        "grad:blocks.1.ln2.out",
        "grad:blocks.1.out",
        "blocks.0.out",
    )
    assert by["grad:blocks.0.mlp.fc1.weight"].inputs == (
        "grad:blocks.0.mlp.fc1.out",
        "blocks.0.ln2.out",
    )
    assert {p for p, _ in localise_models.model_params(TRANSFORMER)} == {
        q.name[5:] for q in qs if q.phase == "backward" and not q.name.endswith(".out")
    }
    shp = localise.shapes(TRANSFORMER, 2)
    assert shp["pos_emb.out"] == (3, 4) and shp["blocks.1.attn.scores.out"] == (2, 2, 3, 3)
    assert shp["blocks.0.mlp.gelu.out"] == (2, 3, 16) and shp["head.out"] == (2, 3, 5)


def _after(order, first):
    """Every quantity from ``first`` on, with the updates of the parameters whose gradients
    are among them (a difference propagates to them)."""
    changed = {n for n in order[order.index(first) :] if not n.startswith("update:")}
    changed |= {f"update:{n[5:]}" for n in changed if n.startswith("grad:")}
    return changed


def test_a_transformer_forward_difference_is_the_op_whose_inputs_agree():
    """candle's tanh GELU: everything before block 0's GELU agrees, its output differs, and
    everything the forward and backward passes compute after it is downstream."""
    order = [q.name for q in localise.quantities(TRANSFORMER)]
    changed = _after(order, "blocks.0.mlp.gelu.out")
    w = localise.walk(TRANSFORMER, 2, _records(TRANSFORMER, 2, changed=changed), {}, SETTINGS)
    assert (w.culprit, w.culprit_phase) == ("blocks.0.mlp.gelu.out", "forward")
    v = _verdicts(w)
    assert v["blocks.0.mlp.fc1.out"] == v["blocks.0.attn.out.out"] == "agrees"
    assert v["head.out"] == v["grad:tok_emb.weight"] == "downstream"
    assert [n for n, x in v.items() if x == "differs"] == ["blocks.0.mlp.gelu.out"]


def test_a_transformer_backward_difference_is_the_gradient_behind_the_op():
    """burn's GELU backward: the gradients down to the last block's GELU output agree, the
    gradient of the GELU's input differs, and every gradient after it is downstream."""
    order = [q.name for q in localise.quantities(TRANSFORMER)]
    changed = _after(order, "grad:blocks.1.mlp.fc1.out")
    w = localise.walk(TRANSFORMER, 2, _records(TRANSFORMER, 2, changed=changed), {}, SETTINGS)
    assert (w.culprit, w.culprit_phase) == ("grad:blocks.1.mlp.fc1.out", "backward")
    v = _verdicts(w)
    assert v["grad:blocks.1.mlp.gelu.out"] == v["grad:blocks.1.mlp.fc2.weight"] == "agrees"
    assert v["grad:blocks.1.mlp.fc1.bias"] == v["update:tok_emb.weight"] == "downstream"
    assert [n for n, x in v.items() if x == "differs"] == ["grad:blocks.1.mlp.fc1.out"]


def test_a_gradient_the_candidate_never_received_is_the_culprit():
    """candle's fused norm without a backward pass: every gradient before it is missing on
    the candidate side only. The first such parameter gradient whose inputs agree is the
    culprit (not the update it leaves unchanged), named with the runner's reason; each later
    one differs too (no gradient flows from one parameter's into another's), and the updates
    are downstream."""
    order = [q.name for q in localise.quantities(TRANSFORMER)]
    cut = order.index("grad:ln_f.out")
    no_grad = [n for n in order[cut:] if n.startswith("grad:")]
    rec = _records(TRANSFORMER, 2, changed={f"update:{n[5:]}" for n in no_grad})
    for role in ("cand32", "cand64"):
        for n in no_grad:
            rec[role].pop(n, None)
    missing = {n: "candle: no gradient reached it" for n in no_grad}
    w = localise.walk(TRANSFORMER, 2, rec, missing, SETTINGS)
    first_param = next(n for n in no_grad if f"update:{n[5:]}" in order)
    assert (w.culprit, w.culprit_phase) == (first_param, "backward")
    rows = {r["quantity"]: r for r in w.rows}
    assert rows[first_param]["note"] == (
        "culprit: no gradient in the candidate (candle: no gradient reached it)"
    )
    assert rows["grad:ln_f.out"]["verdict"] == "not recorded"
    params = [n for n in no_grad if f"update:{n[5:]}" in order]
    assert "grad:tok_emb.weight" in params
    assert [n for n, r in rows.items() if r["verdict"] == "differs"] == params
    assert rows["grad:tok_emb.weight"]["note"].startswith("differs while its inputs agree: ")
    assert {rows[f"update:{n[5:]}"]["verdict"] for n in params} == {"downstream"}


def test_attention_weights_inside_a_fused_op_are_looked_through():
    """PyTorch's sdpa records no scores or weights: not recorded, and a difference in the
    attention's output is judged against q, k and v."""
    order = [q.name for q in localise.quantities(TRANSFORMER)]
    changed = _after(order, "blocks.0.attn.context.out")
    hidden = [f"blocks.{i}.attn.{n}.out" for i in range(2) for n in ("scores", "softmax")]
    missing = {n: "torch: inside sdpa" for h in hidden for n in (h, f"grad:{h}")}
    w = localise.walk(TRANSFORMER, 2, _records(TRANSFORMER, 2, changed=changed), missing, SETTINGS)
    assert w.culprit == "blocks.0.attn.context.out"
    v = _verdicts(w)
    assert v["blocks.0.attn.softmax.out"] == v["grad:blocks.1.attn.scores.out"] == "not recorded"


#: Run in a fresh interpreter: the skipped job's outputs and which heavy modules it loaded.
SKIPPED_JOB = """
import json, logging, sys
from parity.localise import job as localise_job
a = json.load(open(sys.argv[1]))
r = localise_job.localise(a["params"], a["perstep"], None, a["out"], logging.getLogger(), None)
heavy = ("matplotlib", "torch", "parity.localise.replay", "parity.localise.walk", "pyarrow",
         "safetensors")
print(json.dumps({"status": r["status"], "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_a_skipped_localisation_writes_its_table_but_no_csv_or_figure_without_the_replay(
    tmp_path, monkeypatch
):
    """Issue 38: a skipped localisation's table says so; it leaves no header-only CSV and
    no figure (none declared, none written, and a figure an earlier run left is removed),
    and imports neither the replay nor matplotlib."""
    import json
    import os
    import subprocess
    import sys

    from parity.core import integrity

    from conftest import REPO, load_config

    _, params, perstep, out = _job(tmp_path, monkeypatch, load_config(), "a3_sgd", "main")
    integrity.write_sealed_json(perstep, {"verdict": "pass", "kind": "perstep"})
    Path(out["png"]).write_bytes(b"\x89PNG left by a run that localised")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"params": params, "perstep": perstep, "out": out}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts")}
    proc = subprocess.run(
        [sys.executable, "-c", SKIPPED_JOB, str(args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout) == {"status": "skipped", "loaded": []}
    result = integrity.read_sealed_json(out["result"])
    assert result["status"] == "skipped" and "localise.all" in result["reason"]
    assert "skipped: passed" in Path(out["md"]).read_text()
    html = Path(out["md"]).with_suffix(".html").read_text()
    assert "skipped: passed" in html and "<img" not in html
    assert not any(Path(out[k]).exists() for k in ("csv", "png", "svg"))
    assert sorted(result["tables"]) == ["html", "md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "args.json",
        "out.html",
        "out.md",
        "out.result",
        "perstep.json",
        "results",
    ]
