//! The `transformer` family ([`TransformerConfig`]) as a burn port: a GPT-style
//! pre-LayerNorm decoder built from `Embedding`, `LayerNorm` and `Linear`, with the attention
//! written out in burn's tensor ops.
//!
//! For token ids `x` `[B, T]` (int) and `d = d_model`, `H = heads`, `dh = d / H`:
//!
//! * `h = tok_emb(x) + pos_emb(0..T)`: two burn-nn `Embedding`s; the position ids are one row
//!   `[1, T]`, so `pos_emb` gives `[1, T, d]` and the add broadcasts it over the batch (as
//!   PyTorch's `tok_emb(x) + pos_emb(arange(T))`);
//! * per block `blocks.{i}`: `h = h + attn(ln1(h))`, then `h = h + fc2(gelu(fc1(ln2(h))))`;
//!   burn-nn `LayerNorm` (ε = 1e-5, biased variance: burn's own composed layer norm),
//!   `burn::tensor::activation::gelu` (the exact erf form forward; burn-backend 0.22.1's
//!   `gelu_backward` is the derivative of the tanh approximation, which the workflow's
//!   transformer comparisons measure);
//! * `logits = head(ln_f(h))` `[B, T, V]`, `head` a Linear without bias.
//!
//! The attention ([`CausalSelfAttention`]) is explicit ops, not burn-nn's
//! `MultiHeadAttention`, although its `query`/`key`/`value`/`output` Linears would map onto
//! `attn.q`/`k`/`v`/`out`: burn-nn 0.22.1's MHA divides the scores by `√d_k` (`div_scalar`
//! of an f32 `√d_k`), where the specified model multiplies by `1/√dh` (a different rounding
//! unless `√dh` is a power of two), and it masks with its `min_float` (−1e4 by default), not
//! −∞; it also holds a dropout (p 0.1 by default) that would have to be configured off.
//! Here the scores are `q·kᵀ` times `1/√dh` (computed in f64, rounded to the run dtype by
//! `mul_scalar`), the future keys (`j > i`) are set to −∞ with `mask_fill` and burn-nn's
//! `generate_autoregressive_mask`, and `burn::tensor::activation::softmax` runs over the
//! keys. −∞ makes a masked key's weight exactly 0 (`exp(−∞ − max) = +0`; every row keeps its
//! diagonal key, so its max is finite), as PyTorch's `masked_fill(-inf)` does. With −1e4,
//! `exp(−1e4 − max)` is 0 only by underflow (for a row maximum above about −1e4 + 104 in
//! float32, −1e4 + 745 in float64), so −∞ is the model as specified, not an approximation
//! of it that happens to round the same.
//!
//! burn runs only its own layer norm, softmax and exact GELU ([`check_settings`]): the other
//! values of [`LayerNormImpl`], [`SoftmaxImpl`] and [`GeluImpl`] choose candle kernels.

use anyhow::{bail, Result};
use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{gelu, softmax};
use burn::tensor::{Device, Int, Tensor};
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::families::{GeluImpl, LayerNormImpl, SoftmaxImpl, TransformerConfig};

/// The layer norms' ε (PyTorch's `nn.LayerNorm` default, the spec's).
pub const LAYER_NORM_EPS: f64 = 1e-5;

/// Causal multi-head self-attention `attn`: Linears `q`, `k`, `v`, `out` (each d → d with
/// bias).
#[derive(Module, Debug)]
pub struct CausalSelfAttention {
    /// `attn.q`.
    pub q: Linear,
    /// `attn.k`.
    pub k: Linear,
    /// `attn.v`.
    pub v: Linear,
    /// `attn.out`.
    pub out: Linear,
    /// Number of heads H (d is a multiple of it).
    pub heads: usize,
}

/// The MLP of a block: `fc1` (d → 4d) → GELU (erf) → `fc2` (4d → d).
#[derive(Module, Debug)]
pub struct FeedForward {
    /// `mlp.fc1`.
    pub fc1: Linear,
    /// `mlp.fc2`.
    pub fc2: Linear,
}

/// One pre-LayerNorm block `blocks.{i}`.
#[derive(Module, Debug)]
pub struct Block {
    /// `ln1`, before the attention.
    pub ln1: LayerNorm,
    /// `attn`.
    pub attn: CausalSelfAttention,
    /// `ln2`, before the MLP.
    pub ln2: LayerNorm,
    /// `mlp`.
    pub mlp: FeedForward,
}

/// The GPT-style decoder of [`TransformerConfig`] (see the module docs).
#[derive(Module, Debug)]
pub struct Transformer {
    /// `tok_emb`, weight `[vocab, d]`.
    pub tok_emb: Embedding,
    /// `pos_emb`, weight `[seq_len, d]`.
    pub pos_emb: Embedding,
    /// `blocks.0 …`.
    pub blocks: Vec<Block>,
    /// `ln_f`, the final layer norm.
    pub ln_f: LayerNorm,
    /// `head`, d → vocab without bias (burn weight `[d, vocab]`, PyTorch `[vocab, d]`).
    pub head: Linear,
}

/// Refuses the settings that choose candle kernels: burn-parity runs burn's own layer norm
/// (`Composed`), softmax (`Generic`) and exact GELU (`Erf`).
///
/// # Errors
/// For `LayerNormImpl::Fused`, `SoftmaxImpl::LastDim`, `GeluImpl::GeluErf` or
/// `GeluImpl::Tanh`, naming the setting.
pub fn check_settings(
    layer_norm: LayerNormImpl,
    softmax: SoftmaxImpl,
    gelu: GeluImpl,
) -> Result<()> {
    if layer_norm != LayerNormImpl::Composed {
        bail!("transformer layer_norm {layer_norm:?} is a candle-side setting: burn-parity runs burn-nn's LayerNorm (layer_norm \"composed\")");
    }
    if softmax != SoftmaxImpl::Generic {
        bail!("transformer softmax {softmax:?} is a candle-side setting: burn-parity runs burn's activation::softmax (softmax \"generic\")");
    }
    if gelu != GeluImpl::Erf {
        bail!("transformer gelu {gelu:?} is a candle-side setting: burn-parity runs burn's exact activation::gelu (gelu \"erf\")");
    }
    Ok(())
}

/// A burn-nn `LayerNorm` `[d]` with ε = 1e-5 and a bias (its γ and β are the fixture's
/// `weight` and `bias`, found by burn-store's adapter).
fn layer_norm(d: usize, dev: &Device) -> LayerNorm {
    LayerNormConfig::new(d)
        .with_epsilon(LAYER_NORM_EPS)
        .with_bias(true)
        .init(dev)
}

/// A burn-nn `Linear` `inp → out`, with or without a bias.
fn linear(inp: usize, out: usize, bias: bool, dev: &Device) -> Linear {
    LinearConfig::new(inp, out).with_bias(bias).init(dev)
}

impl BurnModel for Transformer {
    const TAPS_ITS_OUTPUT: bool = true;

    /// The modules of the config (burn-store then loads every parameter from the fixture).
    ///
    /// # Errors
    /// A config that is not a transformer's, or a candle-side setting ([`check_settings`]).
    fn init(config: &serde_json::Value, dev: &Device) -> Result<Self> {
        let c = TransformerConfig::from_config(config)?;
        check_settings(c.layer_norm, c.softmax, c.gelu)?;
        let d = c.d_model;
        let blocks = (0..c.blocks)
            .map(|_| Block {
                ln1: layer_norm(d, dev),
                attn: CausalSelfAttention {
                    q: linear(d, d, true, dev),
                    // No key bias (see `TransformerConfig`).
                    k: linear(d, d, false, dev),
                    v: linear(d, d, true, dev),
                    out: linear(d, d, true, dev),
                    heads: c.heads,
                },
                ln2: layer_norm(d, dev),
                mlp: FeedForward {
                    fc1: linear(d, 4 * d, true, dev),
                    fc2: linear(4 * d, d, true, dev),
                },
            })
            .collect();
        Ok(Transformer {
            tok_emb: EmbeddingConfig::new(c.vocab, d).init(dev),
            pos_emb: EmbeddingConfig::new(c.seq_len, d).init(dev),
            blocks,
            ln_f: layer_norm(d, dev),
            head: linear(d, c.vocab, false, dev),
        })
    }

    /// Token ids `[B, T]` → logits `[B, T, vocab]` ([`Transformer::forward_tapped`]).
    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Tokens(x) = x else {
            bail!("the transformer takes token ids [batch, T]");
        };
        Ok(Output::Rank3(self.forward_tapped(x, taps)))
    }
}

impl CausalSelfAttention {
    /// The heads' outputs before `out`: `a` `[B, T, d]` → q, k, v `[B, H, T, dh]` → softmax
    /// over the keys of `q·kᵀ · (1/√dh)` with the keys `j > i` at −∞ → times v → `[B, T, d]`
    /// (head h in columns `h·dh .. (h+1)·dh`, as PyTorch's `transpose(1, 2).reshape`).
    pub fn context(&self, a: Tensor<3>) -> Tensor<3> {
        self.context_tapped(a, "", &mut Taps::inactive())
    }

    /// [`CausalSelfAttention::context`], tapping (paths prefixed with `prefix`,
    /// `blocks.{i}.attn.`): `q`, `k`, `v` `[B, T, d]` (before the split into heads),
    /// `scores` `[B, H, T, T]` (before the mask), `softmax` `[B, H, T, T]` (the weights) and
    /// `context` `[B, T, d]`.
    pub fn context_tapped(&self, a: Tensor<3>, prefix: &str, taps: &mut Taps) -> Tensor<3> {
        let [b, t, d] = a.dims();
        let (h, dh) = (self.heads, d / self.heads);
        let name = |s: &str| format!("{prefix}{s}");
        let split = |y: Tensor<3>| y.reshape([b, t, h, dh]).swap_dims(1, 2);
        let q = split(taps.tap(&name("q"), self.q.forward(a.clone())));
        let k = split(taps.tap(&name("k"), self.k.forward(a.clone())));
        let v = split(taps.tap(&name("v"), self.v.forward(a)));
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .mul_scalar(1.0 / (dh as f64).sqrt());
        let scores = taps.tap(&name("scores"), scores);
        // true above the diagonal: key j > query i.
        let future = generate_autoregressive_mask(1, t, &scores.device())
            .reshape([1, 1, t, t])
            .expand([b, h, t, t]);
        let p = softmax(scores.mask_fill(future, f64::NEG_INFINITY), 3);
        let p = taps.tap(&name("softmax"), p);
        taps.tap(
            &name("context"),
            p.matmul(v).swap_dims(1, 2).reshape([b, t, d]),
        )
    }

    /// `out(context(a))` `[B, T, d]`.
    pub fn forward(&self, a: Tensor<3>) -> Tensor<3> {
        self.out.forward(self.context(a))
    }
}

impl Block {
    /// `h + attn(ln1(h))`, then that plus `fc2(gelu(fc1(ln2(·))))`; `[B, T, d]` → same.
    pub fn forward(&self, h: Tensor<3>) -> Tensor<3> {
        self.forward_tapped(h, 0, &mut Taps::inactive())
    }

    /// [`Block::forward`] of block `i`, tapping its intermediates `blocks.{i}.` `ln1`, the
    /// attention's ([`CausalSelfAttention::context_tapped`]), `attn.out`, `ln2`, `mlp.fc1`,
    /// `mlp.gelu`, `mlp.fc2`, and its output `blocks.{i}`.
    pub fn forward_tapped(&self, h: Tensor<3>, i: usize, taps: &mut Taps) -> Tensor<3> {
        let name = |s: &str| format!("blocks.{i}.{s}");
        let a = taps.tap(&name("ln1"), self.ln1.forward(h.clone()));
        let o = self.attn.context_tapped(a, &name("attn."), taps);
        let h = h + taps.tap(&name("attn.out"), self.attn.out.forward(o));
        let m = taps.tap(&name("ln2"), self.ln2.forward(h.clone()));
        let m = taps.tap(&name("mlp.fc1"), self.mlp.fc1.forward(m));
        let m = taps.tap(&name("mlp.gelu"), gelu(m));
        let m = taps.tap(&name("mlp.fc2"), self.mlp.fc2.forward(m));
        taps.tap(&format!("blocks.{i}"), h + m)
    }
}

impl Transformer {
    /// Token ids `x` `[B, T]` (int, each below vocab; T at most seq_len) → logits
    /// `[B, T, vocab]` in the run dtype, tapping every name of
    /// [`TransformerConfig::tap_names`] (without its `.out`) in forward order: `tok_emb`,
    /// `pos_emb` (`[1, T, d]` here, PyTorch's `[T, d]` flattened alike), each block's
    /// ([`Block::forward_tapped`]), `ln_f` and the logits `head`.
    pub fn forward_tapped(&self, x: Tensor<2, Int>, taps: &mut Taps) -> Tensor<3> {
        let [_, t] = x.dims();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &x.device()).reshape([1, t]);
        let tok = taps.tap("tok_emb", self.tok_emb.forward(x));
        let mut h = tok + taps.tap("pos_emb", self.pos_emb.forward(positions));
        for (i, block) in self.blocks.iter().enumerate() {
            h = block.forward_tapped(h, i, taps);
        }
        let n = taps.tap("ln_f", self.ln_f.forward(h));
        taps.tap("head", self.head.forward(n))
    }
}
