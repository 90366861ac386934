"""The tiny Llama example (examples/tiny_llama, docs/own-model.md "The worked examples")
through the real workflow: a transformers LlamaForCausalLM against its two candle ports,
three steps on two batches of two sequences, run from a folder outside the repository.

* llama_port (every op composed from differentiable candle ops): passes;
* llama_published (candle-transformers' llama as published, fused ops without a backward
  pass): fails, every parameter but lm_head.weight named as never updated, the step-1 loss
  the same as PyTorch's;
* llama_rope_theta (the rotary base lost in the config hand-over): fails at step 1, the
  localisation naming the rotary embedding."""

from __future__ import annotations

import csv
import json
import re

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from parity.plan.plan import Plan
from parity.report import summary as summary_tables
from test_own_model import own_config
from test_own_workflow import snakemake, summary

from conftest import REPO

EXAMPLE = REPO / "examples" / "tiny_llama"
#: The parameters of the example's LlamaForCausalLM (2 layers), in state_dict order.
LAYER = (
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)
PARAMS = [
    "model.embed_tokens.weight",
    *(f"model.layers.{i}.{p}" for i in range(2) for p in LAYER),
    "model.norm.weight",
    "lm_head.weight",
]


def test_a_dtype_the_port_declares_unsupported_runs_no_job_and_is_listed(tmp_path):
    cfg = own_config(tmp_path, {"factory": str(REPO / "examples/template/model.py:make_model")})
    exp = cfg["experiments"]["mine"]
    why = "its fused rms_norm has no float64 kernel"
    exp["model"]["candle"] = {
        "crate": str(REPO / "examples/template/candle-port"),
        "model": "Model",
        "unsupported": {"f64": why},
    }
    exp["runs"] = {"torch": {}, "candle": {}}
    exp["comparisons"] = {"main": {"reference": "torch", "candidate": "candle"}}
    plan = Plan(cfg, workdir=str(tmp_path))
    runs = {(k.run, k.dtype) for k in plan.runs()}
    assert runs == {("torch", "f32"), ("torch", "f64"), ("candle", "f32")}
    cells = [(k.run, k.dtype, reason) for k, reason in plan.unsupported_cells()]
    assert cells == [("candle", "f64", why)]
    validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))
    exp["model"]["candle"]["unsupported"] = {"f16": why}
    with pytest.raises(WorkflowError, match="f16"):
        validate(cfg, str(REPO / "schemas" / "config.schema.yaml"))


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    """The example's config, shortened (3 steps, 2 batches), its crates by absolute path,
    run once from a folder outside the repository."""
    folder = tmp_path_factory.mktemp("llama")
    cfg = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    cfg = json.loads(json.dumps(cfg))  # without YAML's shared anchors
    for exp in cfg["experiments"].values():
        exp["steps"] = 3
        exp["data"]["batches"] = 2
        side = exp["model"]["candle"]
        side["crate"] = str(REPO / side["crate"])
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(folder, "--snakefile", str(REPO / "Snakefile"), "--configfile", "config.yaml")
    return folder


def losses(folder, experiment):
    """step → (torch loss, candle loss) of the float32 runs, from the per-step table."""
    path = folder / "results" / "tables" / experiment / "perstep-cpu.csv"
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {int(r["step"]): (float(r["loss_a"]), float(r["loss_b"])) for r in rows if r["loss_a"]}


@pytest.mark.workflow
def test_the_composed_port_trains_like_pytorch(llama_run):
    row = summary(llama_run)[("llama_port", "main")]
    assert row["verdict"] == "pass", row
    assert row["never_updated"] == ""
    assert float(row["worst_dparam"]) < 1e-6


@pytest.mark.workflow
def test_the_published_llama_names_every_parameter_it_never_updates(llama_run):
    row = summary(llama_run)[("llama_published", "main")]
    assert row["verdict"] == "expected-fail", row
    # Only lm_head sits after the last fused op (model.norm's rms_norm): the gradient
    # reaches it and nothing else.
    never = row["never_updated"].split("; ")
    assert never == [f"candidate: {p}" for p in PARAMS if p != "lm_head.weight"], never
    check = json.loads(
        (llama_run / "results" / "own" / "llama_published" / "check-candle-cpu.json").read_text()
    )
    assert check["no_grad"] == PARAMS[:-1]
    # The localisation: the first parameter gradient PyTorch has and candle never receives
    # is the fused norm's own weight.
    assert (row["culprit"], row["culprit_phase"]) == ("grad:model.norm.weight", "backward")
    # The float64 cell: candle's fused rms_norm has no float64 kernel.
    cells = summary(llama_run)
    assert any(
        k[0] == "llama_published" and r["verdict"] == "unsupported" and "rmsnorm F64" in r["pair"]
        for k, r in cells.items()
    )
    # The loss before any update: the prefixes' last-position logits are the all-position
    # logits, so the loss agrees with PyTorch's to float32 rounding.
    ref, cand = losses(llama_run, "llama_published")[1]
    assert abs(ref - cand) <= 1e-6 * abs(ref), (ref, cand)


@pytest.mark.workflow
def test_a_rotary_base_lost_in_the_config_hand_over_is_found_at_step_one(llama_run):
    row = summary(llama_run)[("llama_rope_theta", "main")]
    assert row["verdict"] == "expected-fail", row
    assert row["never_updated"] == ""
    assert row["culprit"].startswith("model.rotary_emb.out"), row["culprit"]
    assert row["tol_exceeded_step"] == "1", row
    loc = llama_run / "results" / "tables" / "llama_rope_theta"
    text = "".join(p.read_text() for p in loc.glob("localise*.csv"))
    assert re.search(r"model\.rotary_emb\.out", text)


def test_the_markdown_summary_names_the_parameters_never_updated(tmp_path):
    row = {
        **dict.fromkeys(summary_tables.SUMMARY_COLUMNS),
        "experiment": "llama_published",
        "comparison": "main",
        "device": "cpu",
        "verdict": "expected-fail",
        "never_updated": "candidate: model.norm.weight; candidate: model.embed_tokens.weight",
    }
    quiet = {**row, "experiment": "llama_port", "verdict": "pass", "never_updated": ""}
    out = summary_tables.write_tables(
        [quiet, row], str(tmp_path / "summary.csv"), str(tmp_path / "summary.md"), 2
    )
    md = (tmp_path / "summary.md").read_text()
    assert out["md"] == str(tmp_path / "summary.md")
    lines = [line for line in md.splitlines() if "never updated" in line]
    stuck = "candidate: model.norm.weight; candidate: model.embed_tokens.weight"
    assert lines == [f"- never updated in llama_published main cpu: {stuck}"]


def test_a_fail_the_float64_diagnosis_calls_rounding_says_so(tmp_path):
    """A comparison that fails its tolerance while the fp64-referenced rule holds and the
    float64 runs stay within float64 rounding (a bias before a normalisation under AdamW)
    is marked so in the Markdown summary; one whose float64 runs part is not."""
    base = {
        **dict.fromkeys(summary_tables.SUMMARY_COLUMNS),
        "comparison": "main",
        "device": "cpu",
        "verdict": "fail",
        "expected_verdict": "pass",
        "f64_f64": 2.2e-16,
        "fp64_rule_verdict": "pass",
        "f64_divergence_step": None,
    }
    rows = [
        {**base, "experiment": "bias_then_norm"},
        {**base, "experiment": "wrong_formula", "f64_divergence_step": 1},
        {**base, "experiment": "rule_fails", "fp64_rule_verdict": "fail"},
        {**base, "experiment": "no_float64", "f64_f64": None, "fp64_rule_verdict": None},
    ]
    summary_tables.write_tables(rows, str(tmp_path / "s.csv"), str(tmp_path / "s.md"), 4)
    heads = [ln for ln in (tmp_path / "s.md").read_text().splitlines() if ln.startswith("- **")]
    assert len(heads) == 4
    marked = [ln for ln in heads if "finds rounding, not another formula" in ln]
    assert marked == [next(ln for ln in heads if "bias_then_norm" in ln)]
