//! The `transformer` family ([`TransformerConfig`]) as a candle port: a GPT-style
//! pre-LayerNorm decoder built from the run's `Var`s with candle-nn's `Embedding`, `Linear`
//! and layer-norm and softmax functions, as a porter of the PyTorch model would write it.
//!
//! Shapes: token ids `x` `[B, T]` (T ≤ seq_len) → logits `[B, T, V]` in the run dtype.
//! Per block: `a = ln1(h)`; `q, k, v = attn.q/k/v(a)` split into heads `[B, H, T, dh]`;
//! scores `(q·kᵀ)·(1/√dh)` with the future keys (j > i) set to −∞ by `where_cond`; softmax
//! over the keys; `o = p·v` merged back to `[B, T, d]`; `h = h + attn.out(o)`;
//! `h = h + mlp.fc2(GELU(mlp.fc1(ln2(h))))`. Then `ln_f` and `head` (no bias).
//!
//! The fused choices ([`LayerNormImpl::Fused`], [`SoftmaxImpl::LastDim`]) call candle-nn ops
//! that candle 0.11.0 implements without a backward (`apply_op*_no_bwd`): no gradient flows
//! through them, so the parameters they cut off from the loss get none (`grads.get(var)` is
//! `None`), and the optimizers leave those parameters as they are. That is the point of the
//! negative controls, and it is kept as candle does it. candle's fused CPU layer norm has no
//! float64 kernel: a float64 run with it fails with candle's own error
//! (`unsupported dtype for rmsnorm F64`, sic).

use anyhow::{bail, Result};
use candle_core::{Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
use parity_common::candle::{CandleModel, Taps};
use parity_common::families::{GeluImpl, LayerNormImpl, SoftmaxImpl, TransformerConfig};

/// The `missing` reason of a parameter or intermediate without a gradient in a transformer
/// with a fused op (candle 0.11.0 implements no backward for it).
pub const NO_GRADIENT_FUSED: &str = "no gradient (cut off by a fused op without backward)";

/// Layer-norm ε of every norm in the family (PyTorch's default). candle-nn's functions take
/// it as `f32` (`layer_norm_slow` widens it to f64: 1e-5f32 = 9.99999974737875e-6, a formula
/// difference from PyTorch's float64 layer norm); the composed norm here adds it as f64.
pub const LN_EPS: f64 = 1e-5;

/// Layer norm over the last dimension from differentiable ops, as candle-nn 0.11.0's
/// `ops::layer_norm_slow` computes it (mean = Σx/d, variance = Σ(x − mean)²/d, biased)
/// but with ε added in the tensor's own precision from an f64 (`layer_norm_slow` takes ε
/// as f32, so a float64 run would add 9.99999974737875e-6 instead of 1e-5).
/// `x` `[…, d]`, `weight`/`bias` `[d]`, all in the run dtype.
///
/// # Errors
/// On shape mismatches.
pub fn layer_norm_composed(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let d = x.dim(D::Minus1)? as f64;
    let mean = (x.sum_keepdim(D::Minus1)? / d)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = (xc.sqr()?.sum_keepdim(D::Minus1)? / d)?;
    let xn = xc.broadcast_div(&(var + eps)?.sqrt()?)?;
    Ok(xn.broadcast_mul(weight)?.broadcast_add(bias)?)
}

/// One layer norm with weight γ and bias β `[d]`.
struct Norm {
    weight: Tensor,
    bias: Tensor,
    imp: LayerNormImpl,
}

impl Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self.imp {
            LayerNormImpl::Composed => layer_norm_composed(x, &self.weight, &self.bias, LN_EPS)?,
            // `LayerNorm::forward` calls the fused `ops::layer_norm` on a contiguous input;
            // every input here is (the result of an add), so the fused op is what runs.
            LayerNormImpl::Fused => {
                LayerNorm::new(self.weight.clone(), self.bias.clone(), LN_EPS).forward(x)?
            }
        })
    }
}

/// One block's modules.
struct Block {
    ln1: Norm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: Norm,
    fc1: Linear,
    fc2: Linear,
}

/// The transformer built over the run's parameters (each module holds its `Var`'s tensor,
/// so gradients are recorded for the `Var`s themselves).
pub struct Transformer {
    cfg: TransformerConfig,
    tok_emb: Embedding,
    pos_emb: Embedding,
    blocks: Vec<Block>,
    ln_f: Norm,
    head: Linear,
}

impl CandleModel for Transformer {
    const TAPS_ITS_OUTPUT: bool = true;

    /// Builds the modules from the parameters `vb` serves, named as
    /// [`TransformerConfig::params`] names them (PyTorch layout: Linear weights `[out, in]`,
    /// as `candle_nn::Linear` takes them).
    ///
    /// # Errors
    /// A config that is not a transformer's, or the store's refusals.
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let cfg = TransformerConfig::from_config(config)?;
        let d = cfg.d_model;
        let linear = |vb: VarBuilder, inp: usize, out: usize| -> Result<Linear> {
            Ok(Linear::new(
                vb.get((out, inp), "weight")?,
                Some(vb.get(out, "bias")?),
            ))
        };
        // The key projection has no bias (see `TransformerConfig`).
        let no_bias = |vb: VarBuilder, inp: usize, out: usize| -> Result<Linear> {
            Ok(Linear::new(vb.get((out, inp), "weight")?, None))
        };
        let norm = |vb: VarBuilder| -> Result<Norm> {
            Ok(Norm {
                weight: vb.get(d, "weight")?,
                bias: vb.get(d, "bias")?,
                imp: cfg.layer_norm,
            })
        };
        let blocks = (0..cfg.blocks)
            .map(|i| {
                let b = vb.pp(format!("blocks.{i}"));
                Ok(Block {
                    ln1: norm(b.pp("ln1"))?,
                    q: linear(b.pp("attn.q"), d, d)?,
                    k: no_bias(b.pp("attn.k"), d, d)?,
                    v: linear(b.pp("attn.v"), d, d)?,
                    out: linear(b.pp("attn.out"), d, d)?,
                    ln2: norm(b.pp("ln2"))?,
                    fc1: linear(b.pp("mlp.fc1"), d, 4 * d)?,
                    fc2: linear(b.pp("mlp.fc2"), 4 * d, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg,
            tok_emb: Embedding::new(vb.get((cfg.vocab, d), "tok_emb.weight")?, d),
            pos_emb: Embedding::new(vb.get((cfg.seq_len, d), "pos_emb.weight")?, d),
            blocks,
            ln_f: norm(vb.pp("ln_f"))?,
            head: no_bias(vb.pp("head"), d, cfg.vocab)?,
        })
    }

    /// The logits `[B, T, V]` (run dtype) of token ids `x` `[B, T]` (each in `0..vocab`,
    /// T ≤ seq_len), tapping every name of [`TransformerConfig::tap_names`] (without its
    /// `.out`) as soon as it is computed: `tok_emb` `[B, T, d]`, `pos_emb` `[T, d]`; per
    /// block `blocks.{i}.` `ln1`, `attn.q`, `attn.k`, `attn.v` (each `[B, T, d]`, before the
    /// split into heads), `attn.scores` (`(q·kᵀ)·(1/√dh)` before the mask, `[B, H, T, T]`),
    /// `attn.softmax` (the weights after the mask and the softmax, `[B, H, T, T]`),
    /// `attn.context` (`p·v` with the heads merged, `[B, T, d]`), `attn.out`, `ln2`,
    /// `mlp.fc1` `[B, T, 4d]`, `mlp.gelu` `[B, T, 4d]`, `mlp.fc2`, `blocks.{i}` (the residual
    /// stream after the block); then `ln_f` and `head` (the logits).
    ///
    /// # Errors
    /// A shape other than `[B, T]` with T ≤ seq_len, or a candle error (for instance a fused
    /// layer norm in float64, which candle's CPU backend does not implement).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let (_, t) = x.dims2()?;
        if t > self.cfg.seq_len {
            bail!(
                "sequence of {t} tokens, the position embedding has {}",
                self.cfg.seq_len
            );
        }
        let pos = Tensor::arange(0i64, t as i64, x.device())?;
        let tok = taps.tap("tok_emb", &self.tok_emb.forward(x)?)?;
        let mut h = tok.broadcast_add(&taps.tap("pos_emb", &self.pos_emb.forward(&pos)?)?)?;
        for (i, b) in self.blocks.iter().enumerate() {
            let name = |s: &str| format!("blocks.{i}.{s}");
            let a = taps.tap(&name("ln1"), &b.ln1.forward(&h)?)?;
            let o = self.heads(b, i, &a, taps)?;
            h = (h + taps.tap(&name("attn.out"), &b.out.forward(&o)?)?)?;
            let m = taps.tap(&name("ln2"), &b.ln2.forward(&h)?)?;
            let m = taps.tap(&name("mlp.fc1"), &b.fc1.forward(&m)?)?;
            let m = match self.cfg.gelu {
                // x·½·(1 + erf(x/√2)) from ops whose backward is exact.
                GeluImpl::Erf => {
                    ((&m * 0.5)? * ((&m * std::f64::consts::FRAC_1_SQRT_2)?.erf()? + 1.0)?)?
                }
                GeluImpl::GeluErf => m.gelu_erf()?,
                GeluImpl::Tanh => m.gelu()?,
            };
            let m = taps.tap(&name("mlp.gelu"), &m)?;
            let m = taps.tap(&name("mlp.fc2"), &b.fc2.forward(&m)?)?;
            h = taps.tap(&format!("blocks.{i}"), &(h + m)?)?;
        }
        let n = taps.tap("ln_f", &self.ln_f.forward(&h)?)?;
        Ok(taps.tap("head", &self.head.forward(&n)?)?)
    }

    /// [`NO_GRADIENT_FUSED`] when a fused op cuts parameters off from the loss.
    fn why_no_gradient(&self) -> Option<&'static str> {
        self.cfg.has_fused_op().then_some(NO_GRADIENT_FUSED)
    }
}

impl Transformer {
    /// The causal self-attention of block `block` on its normalised input `a` `[B, T, d]`
    /// (run dtype), before `attn.out`: every head's `softmax(mask((q·kᵀ)/√dh))·v`, the heads
    /// side by side, `[B, T, d]` (head `h` in columns `h·dh .. (h+1)·dh`).
    ///
    /// # Errors
    /// A block index out of range, or a shape other than `[B, T, d]`.
    pub fn attention(&self, block: usize, a: &Tensor) -> Result<Tensor> {
        match self.blocks.get(block) {
            Some(b) => self.heads(b, block, a, &mut Taps::inactive()),
            None => bail!("no block {block}"),
        }
    }

    /// See [`Transformer::attention`]; tapping `blocks.{i}.attn.` `q`, `k`, `v`, `scores`,
    /// `softmax` and `context` (block `i`). The scale 1/√dh is computed in f64 and applied with
    /// `Tensor * f64` (an `affine`, rounded once to the run dtype). The causal mask is a
    /// `where_cond` that takes −∞ where key j > query i and the score elsewhere (no 0/−∞
    /// mask is added): its backward passes the scores' gradient where the mask is 0 and none
    /// where it is 1.
    fn heads(&self, b: &Block, i: usize, a: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let (bsz, t, d) = a.dims3()?;
        let (nh, dh) = (self.cfg.heads, self.cfg.head_dim());
        let name = |s: &str| format!("blocks.{i}.attn.{s}");
        let split = |x: Tensor| -> Result<Tensor> {
            Ok(x.reshape((bsz, t, nh, dh))?.transpose(1, 2)?.contiguous()?)
        };
        let q = split(taps.tap(&name("q"), &b.q.forward(a)?)?)?;
        let k = split(taps.tap(&name("k"), &b.k.forward(a)?)?)?;
        let v = split(taps.tap(&name("v"), &b.v.forward(a)?)?)?;
        let scale = 1.0 / (dh as f64).sqrt();
        let scores = taps.tap(&name("scores"), &(q.matmul(&k.t()?)? * scale)?)?;
        let future: Vec<u8> = (0..t)
            .flat_map(|i| (0..t).map(move |j| u8::from(j > i)))
            .collect();
        let mask = Tensor::from_vec(future, (t, t), a.device())?.broadcast_as(scores.shape())?;
        let neg_inf = Tensor::new(f64::NEG_INFINITY, a.device())?
            .to_dtype(scores.dtype())?
            .broadcast_as(scores.shape())?;
        let scores = mask.where_cond(&neg_inf, &scores)?;
        let p = match self.cfg.softmax {
            SoftmaxImpl::Generic => candle_nn::ops::softmax(&scores, D::Minus1)?,
            SoftmaxImpl::LastDim => candle_nn::ops::softmax_last_dim(&scores)?,
        };
        let p = taps.tap(&name("softmax"), &p)?;
        Ok(taps.tap(
            &name("context"),
            &p.matmul(&v)?.transpose(1, 2)?.reshape((bsz, t, d))?,
        )?)
    }
}
