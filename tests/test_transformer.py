"""The transformer family on the Python side: its parameters, its fixture, the PyTorch
model (causal mask, the two attention paths), the never-updated-parameter finding, and how
the config resolves each framework's op choices."""

import math

import numpy as np
import pytest
import torch

from parity.compare import maths as compare
from parity.core import models
from parity.core.config import ConfigError
from parity.localise import walk
from parity.plan.plan import Plan
from parity.trace import fixtures
from parity.trace.reader import TraceReader
from parity.train import torch as torch_runner

from conftest import load_config, write_trace

MODEL = {"family": "transformer", "vocab": 11, "d_model": 8, "heads": 2, "blocks": 2, "seq_len": 5}
SETTINGS = {
    "model": MODEL,
    "loss": "cross_entropy",
    "data": {"seed": 3, "batches": 2, "batch_size": 3},
}


def test_parameters_are_a_gpt_state_dict_without_a_key_bias():
    names = [n for n, _ in models.model_params(MODEL)]
    assert names[:3] == ["tok_emb.weight", "pos_emb.weight", "blocks.0.ln1.weight"]
    assert "blocks.0.attn.k.weight" in names and "blocks.0.attn.k.bias" not in names
    assert "blocks.1.attn.q.bias" in names and names[-1] == "head.weight"
    shapes = dict(models.model_params(MODEL))
    assert shapes["blocks.0.mlp.fc1.weight"] == (32, 8)
    assert shapes["head.weight"] == (11, 8)
    # The Rust spec declares the same count (parity-common's spec test): 2 + 15·blocks + 3.
    assert len(names) == 2 + 15 * 2 + 3


def test_fixture_is_deterministic_and_holds_next_token_targets(tmp_path):
    fixtures.write(tmp_path / "a.safetensors", SETTINGS)
    fixtures.write(tmp_path / "b.safetensors", SETTINGS)
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    fx = fixtures.load(tmp_path / "a.safetensors")
    assert fx["x"].dtype == fx["y"].dtype == np.int64
    assert fx["x"].shape == fx["y"].shape == (2, 3, 5)
    # y is x shifted by one position: the next token.
    assert np.array_equal(fx["x"][..., 1:], fx["y"][..., :-1])
    assert fx["x"].min() >= 0 and fx["y"].max() < 11
    assert np.all(fx["blocks.0.ln1.weight"] == 1) and np.all(fx["ln_f.bias"] == 0)
    bound = 1 / math.sqrt(8)
    assert np.abs(fx["blocks.0.attn.q.weight"]).max() <= bound
    assert np.abs(fx["blocks.0.mlp.fc2.weight"]).max() <= 1 / math.sqrt(32)


def _params(dtype=torch.float64):
    fx = fixtures.draw(SETTINGS)
    return fx, {n: torch.tensor(fx[n], dtype=dtype) for n, _ in models.model_params(MODEL)}


def test_the_causal_mask_hides_the_future_exactly():
    fx, p = _params()
    x = torch.tensor(fx["x"][0])
    logits = torch_runner.transformer(MODEL, p, x)
    assert logits.shape == (3, 5, 11)
    changed = x.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 11
    other = torch_runner.transformer(MODEL, p, changed)
    assert torch.equal(logits[:, :3], other[:, :3])
    assert not torch.equal(logits[:, 3], other[:, 3])


def test_sdpa_computes_the_explicit_attention_to_rounding():
    fx, p = _params(torch.float32)
    x = torch.tensor(fx["x"][0])
    explicit = torch_runner.transformer(MODEL, p, x)
    sdpa = torch_runner.transformer({**MODEL, "attention": "sdpa"}, p, x)
    assert torch.allclose(explicit, sdpa, rtol=0, atol=1e-5)


def test_the_loss_is_the_mean_next_token_cross_entropy():
    fx, p = _params()
    x, y = torch.tensor(fx["x"][0]), torch.tensor(fx["y"][0])
    logits = torch_runner.transformer(MODEL, p, x)
    loss = torch_runner.loss_fn("cross_entropy", logits, y)
    logp = torch.log_softmax(logits, -1)
    want = -logp.gather(-1, y.unsqueeze(-1)).mean()
    assert torch.allclose(loss, want, rtol=1e-12, atol=0)


def test_a_parameter_never_updated_on_one_side_is_named(tmp_path):
    """The finding of a gradient that never arrives (a fused op without backward)."""
    w0, b0 = np.array([1.0, 2.0]), np.array([0.5])
    ref = [{"w": w0, "b": b0}, {"w": w0 - 0.1, "b": b0 - 0.1}, {"w": w0 - 0.2, "b": b0 - 0.2}]
    cand = [{"w": w0, "b": b0}, {"w": w0 - 0.1, "b": b0}, {"w": w0 - 0.2, "b": b0}]
    r = TraceReader(write_trace(tmp_path / "ref.parquet", ref))
    c = TraceReader(write_trace(tmp_path / "cand.parquet", cand, run="candle"))
    assert compare.perstep(r, c).never_updated == ["candidate: b"]
    # A parameter neither side moves is no difference; the reference side is named too.
    r = TraceReader(write_trace(tmp_path / "r2.parquet", cand))
    c = TraceReader(write_trace(tmp_path / "c2.parquet", ref, run="candle"))
    assert compare.perstep(r, c).never_updated == ["reference: b"]
    same = TraceReader(write_trace(tmp_path / "same.parquet", cand, run="candle"))
    assert compare.perstep(r, same).never_updated == []


def test_each_framework_resolves_its_op_choices():
    plan = Plan(load_config())
    torch_s = plan.run_settings("transformer_adamw", "torch_sdpa")
    assert torch_s["model"]["attention"] == "sdpa"
    candle = plan.run_settings("transformer_fused", "candle")["model"]
    assert (candle["layer_norm"], candle["softmax"], candle["gelu"]) == ("fused", "last_dim", "erf")
    burn = plan.run_settings("transformer_adamw", "burn")["model"]
    assert (burn["layer_norm"], burn["softmax"], burn["gelu"]) == ("composed", "generic", "erf")


def test_the_fused_layer_norm_has_no_float64_cell():
    plan = Plan(load_config())
    cells = {(k.experiment, k.run, k.dtype): why for k, why in plan.unsupported_cells()}
    assert "rmsnorm F64" in cells[("transformer_fused", "candle", "f64")]
    (main,) = [
        c for c in plan.comparisons() if c.experiment == "transformer_fused" and c.name == "main"
    ]
    assert main.f64_pair is None and main.kinds == ["perstep", "localise"]
    runs = {(k.experiment, k.run, k.dtype) for k in plan.runs()}
    assert ("transformer_fused", "candle", "f64") not in runs
    assert ("transformer_fused", "torch", "f64") in runs


@pytest.mark.parametrize(
    ("where", "override", "message"),
    [
        ("a3_adamw", {"candle": {"gelu": "tanh"}}, r"runs.candle.gelu: only transformer"),
        ("a3_adamw", {"torch": {"attention": "sdpa"}}, r"runs.torch.attention: only transformer"),
    ],
)
def test_transformer_options_elsewhere_are_refused(where, override, message):
    config = load_config()
    for run, o in override.items():
        config["experiments"][where]["runs"][run] = o
    with pytest.raises(ConfigError, match=message):
        Plan(config)


def test_heads_must_divide_the_width():
    config = load_config()
    config["experiments"]["transformer_adamw"]["model"] = {**MODEL, "heads": 3}
    with pytest.raises(
        ConfigError, match=r"transformer_adamw.model.heads: d_model 8 is not a multiple"
    ):
        Plan(config)


def test_the_forward_taps_name_every_module_output_in_forward_order():
    """The replay's taps: every name of ``localise.forward_names`` but the loss, in forward
    order, each of the shape ``localise.shapes`` gives; tapping changes no value."""
    fx, p = _params(torch.float32)
    p = {n: t.requires_grad_() for n, t in p.items()}
    x = torch.tensor(fx["x"][0])
    taps = {}
    logits = torch_runner.forward(MODEL, p, x, None, taps)
    assert list(taps) == walk.forward_names(MODEL)[:-1]
    assert list(taps)[12] == "blocks.0.mlp.gelu.out"
    shapes = walk.shapes(MODEL, 3)
    assert {n: tuple(t.shape) for n, t in taps.items()} == {n: shapes[n] for n in taps}
    assert torch.equal(logits, torch_runner.transformer(MODEL, p, x)) and logits is taps["head.out"]
    # With sdpa the scores and weights stay inside the fused op.
    sdpa = {**MODEL, "attention": "sdpa"}
    taps = {}
    torch_runner.forward(sdpa, p, x, None, taps)
    hidden = {f"blocks.{i}.attn.{n}.out" for i in range(2) for n in ("scores", "softmax")}
    assert set(walk.forward_names(MODEL)[:-1]) - set(taps) == hidden
    missing = torch_runner.untapped(sdpa)
    assert len(missing) == 8 and missing[0].startswith("blocks.0.attn.scores.out: inside F.")
    assert missing[4].startswith("grad:blocks.0.attn.scores.out: ")
    assert torch_runner.untapped(MODEL) == []


def test_a_replay_records_every_intermediate_and_its_gradient(tmp_path):
    """The PyTorch replay of a transformer step: every forward quantity, its gradient and
    each parameter's; with sdpa the header names what the fused op hides."""
    plan = Plan(load_config())
    for run, hidden in (("torch", 0), ("torch_sdpa", 8)):
        s = plan.run_settings("transformer_adamw", run)
        path = tmp_path / f"{run}.safetensors"
        fixtures.write(path, s)
        fx = fixtures.load(path)
        names = [n for n, _ in models.model_params(s["model"])]
        out, header = torch_runner.replay(
            s, str(path), {n: fx[n] for n in names}, 0, 1, "cpu", "f64", 1
        )
        forward = walk.forward_names(s["model"])
        missing = [
            m.partition(": ")[0] for m in filter(None, header.get("missing", "").split("; "))
        ]
        assert len(missing) == hidden
        want = {*forward, *(f"grad:{n}" for n in forward[:-1])} - set(missing)
        want |= {f"{k}:{n}" for n in names for k in ("grad", "after")}
        assert set(out) == want
        g = out["grad:blocks.1.mlp.gelu.out"].reshape(-1, 64)
        assert g.shape == (4 * 8, 64) and np.abs(g).max() > 0
