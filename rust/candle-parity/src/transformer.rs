//! The transformer family ([`Model::Transformer`]): a GPT-style pre-LayerNorm decoder built
//! from the run's `Var`s with candle-nn's `Embedding`, `Linear` and layer-norm and softmax
//! functions, as a porter of the PyTorch model would write it.
//!
//! Shapes: token ids `x` `[B, T]` int64 (T ≤ seq_len) → logits `[B, T, V]` in the run dtype.
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
use candle_core::{DType, Tensor, Var, D};
use candle_nn::{Embedding, LayerNorm, Linear, Module};
use parity_common::spec::{GeluImpl, LayerNormImpl, Model, SoftmaxImpl};

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

/// The hyperparameters of [`Model::Transformer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Vocabulary size V.
    pub vocab: usize,
    /// Model width d.
    pub d_model: usize,
    /// Attention heads H (d = H·dh).
    pub heads: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// Maximum sequence length (rows of `pos_emb`).
    pub seq_len: usize,
    /// Composed or fused layer norm.
    pub layer_norm: LayerNormImpl,
    /// Generic or fused last-dimension softmax.
    pub softmax: SoftmaxImpl,
    /// Erf or tanh GELU.
    pub gelu: GeluImpl,
}

impl Config {
    /// The configuration of a [`Model::Transformer`], `None` for the other families.
    pub fn of(model: &Model) -> Option<Config> {
        match *model {
            Model::Transformer {
                vocab,
                d_model,
                heads,
                blocks,
                seq_len,
                layer_norm,
                softmax,
                gelu,
            } => Some(Config {
                vocab,
                d_model,
                heads,
                blocks,
                seq_len,
                layer_norm,
                softmax,
                gelu,
            }),
            _ => None,
        }
    }

    /// Head width dh = d / H.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    /// Whether some op of this configuration has no backward in candle 0.11.0 (a fused
    /// layer norm or the last-dimension softmax), so that some parameters get no gradient.
    pub fn has_fused_op(&self) -> bool {
        self.layer_norm == LayerNormImpl::Fused || self.softmax == SoftmaxImpl::LastDim
    }
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

/// The transformer built over the run's parameters (each module holds a clone of its
/// `Var`'s tensor, so gradients are recorded for the `Var`s themselves).
pub struct Transformer {
    cfg: Config,
    tok_emb: Embedding,
    pos_emb: Embedding,
    blocks: Vec<Block>,
    ln_f: Norm,
    head: Linear,
}

impl Transformer {
    /// Builds the modules from the parameters `get(name)` returns, named as
    /// [`Model::params`] names them (PyTorch layout: Linear weights `[out, in]`, as
    /// `candle_nn::Linear` takes them).
    ///
    /// # Errors
    /// When `get` fails for a parameter.
    pub fn new<'a>(cfg: Config, get: impl Fn(&str) -> Result<&'a Var>) -> Result<Self> {
        let t = |name: &str| -> Result<Tensor> { Ok(get(name)?.as_tensor().clone()) };
        let linear = |name: &str| -> Result<Linear> {
            Ok(Linear::new(
                t(&format!("{name}.weight"))?,
                Some(t(&format!("{name}.bias"))?),
            ))
        };
        // The key projection has no bias (see `Model::Transformer`).
        let no_bias =
            |name: &str| -> Result<Linear> { Ok(Linear::new(t(&format!("{name}.weight"))?, None)) };
        let norm = |name: &str| -> Result<Norm> {
            Ok(Norm {
                weight: t(&format!("{name}.weight"))?,
                bias: t(&format!("{name}.bias"))?,
                imp: cfg.layer_norm,
            })
        };
        let blocks = (0..cfg.blocks)
            .map(|i| {
                let p = |s: &str| format!("blocks.{i}.{s}");
                Ok(Block {
                    ln1: norm(&p("ln1"))?,
                    q: linear(&p("attn.q"))?,
                    k: no_bias(&p("attn.k"))?,
                    v: linear(&p("attn.v"))?,
                    out: linear(&p("attn.out"))?,
                    ln2: norm(&p("ln2"))?,
                    fc1: linear(&p("mlp.fc1"))?,
                    fc2: linear(&p("mlp.fc2"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg,
            tok_emb: Embedding::new(t("tok_emb.weight")?, cfg.d_model),
            pos_emb: Embedding::new(t("pos_emb.weight")?, cfg.d_model),
            blocks,
            ln_f: norm("ln_f")?,
            head: Linear::new(t("head.weight")?, None),
        })
    }

    /// The logits `[B, T, V]` (run dtype) of token ids `x` `[B, T]` (int64, each in
    /// `0..vocab`, T ≤ seq_len).
    ///
    /// # Errors
    /// A shape other than `[B, T]` with T ≤ seq_len, or a candle error (for instance a fused
    /// layer norm in float64, which candle's CPU backend does not implement).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, &mut |_, h| Ok(h))
    }

    /// [`Transformer::forward`], calling `at(name, h)` on each named intermediate `h` as
    /// soon as it is computed and continuing with what `at` returns (the identity in
    /// [`Transformer::forward`], `h` plus a −0.0 tap in the replay). The names are
    /// [`parity_common::replay::transformer_forward_names`], in this order: `tok_emb.out`
    /// `[B, T, d]`, `pos_emb.out` `[T, d]`; per block `blocks.{i}.` `ln1.out`, `attn.q.out`,
    /// `attn.k.out`, `attn.v.out` (each `[B, T, d]`, before the split into heads),
    /// `attn.scores.out` (`(q·kᵀ)·(1/√dh)` before the mask, `[B, H, T, T]`),
    /// `attn.softmax.out` (the weights after the mask and the softmax, `[B, H, T, T]`),
    /// `attn.context.out` (`p·v` with the heads merged, `[B, T, d]`), `attn.out.out`,
    /// `ln2.out`, `mlp.fc1.out` `[B, T, 4d]`, `mlp.gelu.out` `[B, T, 4d]`, `mlp.fc2.out`,
    /// `blocks.{i}.out` (the residual stream after the block); then `ln_f.out` and
    /// `head.out` (the logits).
    ///
    /// # Errors
    /// As [`Transformer::forward`], or what `at` returns.
    pub fn forward_with(
        &self,
        x: &Tensor,
        at: &mut dyn FnMut(&str, Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let (_, t) = x.dims2()?;
        if t > self.cfg.seq_len {
            bail!(
                "sequence of {t} tokens, the position embedding has {}",
                self.cfg.seq_len
            );
        }
        let pos = Tensor::arange(0i64, t as i64, x.device())?;
        let tok = at("tok_emb.out", self.tok_emb.forward(x)?)?;
        let mut h = tok.broadcast_add(&at("pos_emb.out", self.pos_emb.forward(&pos)?)?)?;
        for (i, b) in self.blocks.iter().enumerate() {
            let name = |s: &str| format!("blocks.{i}.{s}");
            let a = at(&name("ln1.out"), b.ln1.forward(&h)?)?;
            let o = self.heads(b, i, &a, at)?;
            h = (h + at(&name("attn.out.out"), b.out.forward(&o)?)?)?;
            let m = at(&name("ln2.out"), b.ln2.forward(&h)?)?;
            let m = at(&name("mlp.fc1.out"), b.fc1.forward(&m)?)?;
            let m = match self.cfg.gelu {
                // x·½·(1 + erf(x/√2)) from ops whose backward is exact.
                GeluImpl::Erf => {
                    ((&m * 0.5)? * ((&m * std::f64::consts::FRAC_1_SQRT_2)?.erf()? + 1.0)?)?
                }
                GeluImpl::GeluErf => m.gelu_erf()?,
                GeluImpl::Tanh => m.gelu()?,
            };
            let m = at(&name("mlp.gelu.out"), m)?;
            let m = at(&name("mlp.fc2.out"), b.fc2.forward(&m)?)?;
            h = at(&format!("blocks.{i}.out"), (h + m)?)?;
        }
        let n = at("ln_f.out", self.ln_f.forward(&h)?)?;
        at("head.out", self.head.forward(&n)?)
    }

    /// The causal self-attention of block `block` on its normalised input `a` `[B, T, d]`
    /// (run dtype), before `attn.out`: every head's `softmax(mask((q·kᵀ)/√dh))·v`, the heads
    /// side by side, `[B, T, d]` (head `h` in columns `h·dh .. (h+1)·dh`).
    ///
    /// # Errors
    /// A block index out of range, or a shape other than `[B, T, d]`.
    pub fn attention(&self, block: usize, a: &Tensor) -> Result<Tensor> {
        match self.blocks.get(block) {
            Some(b) => self.heads(b, block, a, &mut |_, h| Ok(h)),
            None => bail!("no block {block}"),
        }
    }

    /// See [`Transformer::attention`]; `at` as in [`Transformer::forward_with`], called on
    /// `blocks.{i}.attn.` `q.out`, `k.out`, `v.out`, `scores.out`, `softmax.out` and
    /// `context.out` (block `i`). The scale 1/√dh is computed in f64 and applied with
    /// `Tensor * f64` (an `affine`, rounded once to the run dtype). The causal mask is a
    /// `where_cond` that takes −∞ where key j > query i and the score elsewhere (no 0/−∞
    /// mask is added): its backward passes the scores' gradient where the mask is 0 and none
    /// where it is 1.
    fn heads(
        &self,
        b: &Block,
        i: usize,
        a: &Tensor,
        at: &mut dyn FnMut(&str, Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let (bsz, t, d) = a.dims3()?;
        let (nh, dh) = (self.cfg.heads, self.cfg.head_dim());
        let name = |s: &str| format!("blocks.{i}.attn.{s}");
        let split = |x: Tensor| -> Result<Tensor> {
            Ok(x.reshape((bsz, t, nh, dh))?.transpose(1, 2)?.contiguous()?)
        };
        let q = split(at(&name("q.out"), b.q.forward(a)?)?)?;
        let k = split(at(&name("k.out"), b.k.forward(a)?)?)?;
        let v = split(at(&name("v.out"), b.v.forward(a)?)?)?;
        let scale = 1.0 / (dh as f64).sqrt();
        let scores = at(&name("scores.out"), (q.matmul(&k.t()?)? * scale)?)?;
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
        let p = at(&name("softmax.out"), p)?;
        at(
            &name("context.out"),
            p.matmul(&v)?.transpose(1, 2)?.reshape((bsz, t, d))?,
        )
    }
}

/// Checks a transformer fixture's token tensor (`x` or `y`, `[batches, batch, T]`): int64,
/// rank 3, T ≤ seq_len, every id in `0..vocab`.
///
/// # Errors
/// Describing the first violation.
pub fn check_tokens(name: &str, t: &Tensor, cfg: &Config) -> Result<()> {
    if t.dtype() != DType::I64 || t.rank() != 3 || t.dims()[2] > cfg.seq_len {
        bail!(
            "{name} is {:?} {:?}; the transformer takes int64 [batches, batch, T] with T ≤ {}",
            t.dtype(),
            t.dims(),
            cfg.seq_len
        );
    }
    let ids = t.flatten_all()?.to_vec1::<i64>()?;
    if let Some(bad) = ids.iter().find(|&&i| i < 0 || i as usize >= cfg.vocab) {
        bail!("{name} holds token id {bad}, outside 0..{}", cfg.vocab);
    }
    Ok(())
}
