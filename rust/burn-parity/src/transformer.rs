//! The transformer family ([`Model::Transformer`]) as burn-nn modules: a GPT-style
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

use anyhow::{bail, Context, Result};
use burn::module::{Module, Param};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::{Embedding, LayerNorm, LayerNormConfig, Linear};
use burn::tensor::activation::{gelu, softmax};
use burn::tensor::{Device, Int, Tensor, TensorData};
use parity_common::spec::{FloatType, GeluImpl, LayerNormImpl, Model, RunSpec, SoftmaxImpl};

use crate::data::{per_batch, Inputs, Targets};
use crate::device::float_tensor;
use crate::fixture::Fixture;
use crate::layers::{linear, linear_slot_mut, linear_slots, linear_without_bias, Slot, SlotMut};
use crate::layout;
use crate::taps::Taps;

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

/// The GPT-style decoder of [`Model::Transformer`] (see the module docs).
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

/// A burn-nn `LayerNorm` (ε = 1e-5, with bias) with `{name}.weight` and `{name}.bias` `[d]`
/// from the fixture.
fn layer_norm(
    fx: &Fixture,
    name: &str,
    d: usize,
    ty: FloatType,
    dev: &Device,
) -> Result<LayerNorm> {
    let mut ln = LayerNormConfig::new(d)
        .with_epsilon(LAYER_NORM_EPS)
        .with_bias(true)
        .init(dev);
    let w = fx.f32(&format!("{name}.weight"), &[d])?;
    let b = fx.f32(&format!("{name}.bias"), &[d])?;
    ln.gamma = Param::from_tensor(float_tensor(w, [d], ty, dev));
    ln.beta = Some(Param::from_tensor(float_tensor(b, [d], ty, dev)));
    Ok(ln)
}

/// A burn-nn `Embedding` with `{name}.weight` `[rows, d]` from the fixture (same layout).
fn embedding(
    fx: &Fixture,
    name: &str,
    rows: usize,
    d: usize,
    ty: FloatType,
    dev: &Device,
) -> Result<Embedding> {
    let w = fx.f32(&format!("{name}.weight"), &[rows, d])?;
    Ok(Embedding {
        weight: Param::from_tensor(float_tensor(w, [rows, d], ty, dev)),
    })
}

/// Int64 token ids `name` `[batches, batch, seq_len]` from the fixture, each in `0..vocab`,
/// and `(batches, batch)`.
fn tokens<'a>(
    fx: &'a Fixture,
    name: &str,
    seq_len: usize,
    vocab: usize,
) -> Result<(&'a [i64], usize, usize)> {
    let (shape, v) = fx.i64s.get(name).with_context(|| {
        format!(
            "fixture {}: the transformer needs int64 token ids {name:?}",
            fx.path
        )
    })?;
    if shape.len() != 3 || shape[2] != seq_len {
        bail!(
            "fixture {}: {name} is I64 {shape:?}, expected [batches, batch, {seq_len}]",
            fx.path
        );
    }
    if let Some(bad) = v.iter().find(|&&t| t < 0 || t as usize >= vocab) {
        bail!(
            "fixture {}: {name} holds token {bad}, outside 0..{vocab}",
            fx.path
        );
    }
    Ok((v, shape[0], shape[1]))
}

/// Builds the transformer of `spec` (a [`Model::Transformer`]) from its fixture in the run
/// dtype on `dev`, and its data: inputs `x` `[batch, seq_len]` and targets `y` flattened to
/// `[batch·seq_len]` per batch (int).
///
/// # Errors
/// A candle-side setting ([`check_settings`]); a parameter missing from the fixture or not
/// float32 of its PyTorch shape; `x` or `y` not int64 `[batches, batch, seq_len]` (the same
/// shape both) or holding a token outside `0..vocab`.
///
/// # Panics
/// When `spec.model` is not a transformer.
pub(crate) fn load(
    spec: &RunSpec,
    fx: &Fixture,
    dev: &Device,
) -> Result<(Transformer, Inputs, Targets)> {
    let Model::Transformer {
        vocab,
        d_model: d,
        heads,
        blocks,
        seq_len,
        layer_norm: ln_impl,
        softmax: sm_impl,
        gelu: gelu_impl,
    } = spec.model
    else {
        panic!("transformer::load of a {:?}", spec.model)
    };
    check_settings(ln_impl, sm_impl, gelu_impl)?;
    let ty = spec.dtype;
    let blocks = (0..blocks)
        .map(|i| -> Result<Block> {
            let b = |s: &str| format!("blocks.{i}.{s}");
            Ok(Block {
                ln1: layer_norm(fx, &b("ln1"), d, ty, dev)?,
                attn: CausalSelfAttention {
                    q: linear(fx, &b("attn.q"), d, d, ty, dev)?,
                    // No key bias (see `Model::Transformer`).
                    k: linear_without_bias(fx, &b("attn.k"), d, d, ty, dev)?,
                    v: linear(fx, &b("attn.v"), d, d, ty, dev)?,
                    out: linear(fx, &b("attn.out"), d, d, ty, dev)?,
                    heads,
                },
                ln2: layer_norm(fx, &b("ln2"), d, ty, dev)?,
                mlp: FeedForward {
                    fc1: linear(fx, &b("mlp.fc1"), d, 4 * d, ty, dev)?,
                    fc2: linear(fx, &b("mlp.fc2"), 4 * d, d, ty, dev)?,
                },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let head_w = fx.f32("head.weight", &[vocab, d])?;
    let head = Linear {
        weight: Param::from_tensor(float_tensor(
            &layout::torch_to_burn_linear(head_w, vocab, d),
            [d, vocab],
            ty,
            dev,
        )),
        bias: None,
    };
    let net = Transformer {
        tok_emb: embedding(fx, "tok_emb", vocab, d, ty, dev)?,
        pos_emb: embedding(fx, "pos_emb", seq_len, d, ty, dev)?,
        blocks,
        ln_f: layer_norm(fx, "ln_f", d, ty, dev)?,
        head,
    };

    let (x, batches, batch) = tokens(fx, "x", seq_len, vocab)?;
    let (y, y_batches, y_batch) = tokens(fx, "y", seq_len, vocab)?;
    if (y_batches, y_batch) != (batches, batch) {
        bail!(
            "fixture {}: y is [{y_batches}, {y_batch}, {seq_len}], x [{batches}, {batch}, {seq_len}]",
            fx.path
        );
    }
    let int = |v: &[i64], shape: Vec<usize>| {
        Tensor::<2, Int>::from_data(TensorData::new(v.to_vec(), shape), dev)
    };
    let inputs = per_batch(x, batches)
        .map(|b| int(b, vec![batch, seq_len]))
        .collect();
    let targets = per_batch(y, batches)
        .map(|b| Tensor::<1, Int>::from_data(TensorData::new(b.to_vec(), [batch * seq_len]), dev))
        .collect();
    Ok((net, Inputs::Tokens(inputs), Targets::Classes(targets)))
}

impl CausalSelfAttention {
    /// The heads' outputs before `out`: `a` `[B, T, d]` → q, k, v `[B, H, T, dh]` → softmax
    /// over the keys of `q·kᵀ · (1/√dh)` with the keys `j > i` at −∞ → times v → `[B, T, d]`
    /// (head h in columns `h·dh .. (h+1)·dh`, as PyTorch's `transpose(1, 2).reshape`).
    pub fn context(&self, a: Tensor<3>) -> Tensor<3> {
        self.context_tapped(a, "", &mut Taps::off())
    }

    /// [`CausalSelfAttention::context`], marking in `taps` (names prefixed with `prefix`,
    /// `blocks.{i}.attn.`): `q.out`, `k.out`, `v.out` `[B, T, d]` (before the split into
    /// heads), `scores.out` `[B, H, T, T]` (before the mask), `softmax.out` `[B, H, T, T]`
    /// (the weights) and `context.out` `[B, T, d]`.
    pub fn context_tapped(&self, a: Tensor<3>, prefix: &str, taps: &mut Taps) -> Tensor<3> {
        let [b, t, d] = a.dims();
        let (h, dh) = (self.heads, d / self.heads);
        let name = |s: &str| format!("{prefix}{s}");
        let split = |y: Tensor<3>| y.reshape([b, t, h, dh]).swap_dims(1, 2);
        let q = split(taps.mark3(&name("q.out"), self.q.forward(a.clone())));
        let k = split(taps.mark3(&name("k.out"), self.k.forward(a.clone())));
        let v = split(taps.mark3(&name("v.out"), self.v.forward(a)));
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .mul_scalar(1.0 / (dh as f64).sqrt());
        let scores = taps.mark4(&name("scores.out"), scores);
        // true above the diagonal: key j > query i.
        let future = generate_autoregressive_mask(1, t, &scores.device())
            .reshape([1, 1, t, t])
            .expand([b, h, t, t]);
        let p = softmax(scores.mask_fill(future, f64::NEG_INFINITY), 3);
        let p = taps.mark4(&name("softmax.out"), p);
        taps.mark3(
            &name("context.out"),
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
        self.forward_tapped(h, 0, &mut Taps::off())
    }

    /// [`Block::forward`] of block `i`, marking in `taps` its intermediates
    /// `blocks.{i}.` `ln1.out`, the attention's ([`CausalSelfAttention::context_tapped`]),
    /// `attn.out.out`, `ln2.out`, `mlp.fc1.out`, `mlp.gelu.out`, `mlp.fc2.out`, and its
    /// output `blocks.{i}.out`.
    pub fn forward_tapped(&self, h: Tensor<3>, i: usize, taps: &mut Taps) -> Tensor<3> {
        let name = |s: &str| format!("blocks.{i}.{s}");
        let a = taps.mark3(&name("ln1.out"), self.ln1.forward(h.clone()));
        let o = self.attn.context_tapped(a, &name("attn."), taps);
        let h = h + taps.mark3(&name("attn.out.out"), self.attn.out.forward(o));
        let m = taps.mark3(&name("ln2.out"), self.ln2.forward(h.clone()));
        let m = taps.mark3(&name("mlp.fc1.out"), self.mlp.fc1.forward(m));
        let m = taps.mark3(&name("mlp.gelu.out"), gelu(m));
        let m = taps.mark3(&name("mlp.fc2.out"), self.mlp.fc2.forward(m));
        taps.mark3(&format!("blocks.{i}.out"), h + m)
    }
}

impl Transformer {
    /// Token ids `x` `[B, T]` (int, each below vocab; T at most seq_len) → logits
    /// `[B, T, vocab]` in the run dtype.
    pub fn forward(&self, x: Tensor<2, Int>) -> Tensor<3> {
        self.forward_tapped(x, &mut Taps::off())
    }

    /// [`Transformer::forward`], marking in `taps` every intermediate of
    /// [`parity_common::replay::transformer_forward_names`] in forward order: `tok_emb.out`,
    /// `pos_emb.out` (`[1, T, d]` here, PyTorch's `[T, d]` flattened alike), each block's
    /// ([`Block::forward_tapped`]), `ln_f.out` and the logits `head.out`.
    pub fn forward_tapped(&self, x: Tensor<2, Int>, taps: &mut Taps) -> Tensor<3> {
        let [_, t] = x.dims();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &x.device()).reshape([1, t]);
        let tok = taps.mark3("tok_emb.out", self.tok_emb.forward(x));
        let mut h = tok + taps.mark3("pos_emb.out", self.pos_emb.forward(positions));
        for (i, block) in self.blocks.iter().enumerate() {
            h = block.forward_tapped(h, i, taps);
        }
        let n = taps.mark3("ln_f.out", self.ln_f.forward(h));
        taps.mark3("head.out", self.head.forward(n))
    }

    /// Every parameter in state_dict order ([`Model::params`]) with its layout.
    pub(crate) fn slots(&self) -> Vec<(String, Slot<'_>)> {
        fn ln(name: String, l: &LayerNorm) -> Vec<(String, Slot<'_>)> {
            let mut v = vec![(format!("{name}.weight"), Slot::Vector(&l.gamma))];
            v.extend(
                l.beta
                    .as_ref()
                    .map(|b| (format!("{name}.bias"), Slot::Vector(b))),
            );
            v
        }
        let mut v = vec![
            (
                "tok_emb.weight".to_string(),
                Slot::Matrix(&self.tok_emb.weight),
            ),
            (
                "pos_emb.weight".to_string(),
                Slot::Matrix(&self.pos_emb.weight),
            ),
        ];
        for (i, b) in self.blocks.iter().enumerate() {
            v.extend(ln(format!("blocks.{i}.ln1"), &b.ln1));
            for (m, l) in [
                ("q", &b.attn.q),
                ("k", &b.attn.k),
                ("v", &b.attn.v),
                ("out", &b.attn.out),
            ] {
                v.extend(linear_slots(format!("blocks.{i}.attn.{m}"), l));
            }
            v.extend(ln(format!("blocks.{i}.ln2"), &b.ln2));
            v.extend(linear_slots(format!("blocks.{i}.mlp.fc1"), &b.mlp.fc1));
            v.extend(linear_slots(format!("blocks.{i}.mlp.fc2"), &b.mlp.fc2));
        }
        v.extend(ln("ln_f".into(), &self.ln_f));
        v.extend(linear_slots("head".into(), &self.head));
        v
    }

    /// The parameter `module.field` (a name of [`Transformer::slots`]), mutably.
    ///
    /// # Panics
    /// For a name that is not one of the transformer's.
    pub(crate) fn slot_mut(&mut self, module: &str, field: &str) -> SlotMut<'_> {
        fn ln<'a>(l: &'a mut LayerNorm, field: &str) -> SlotMut<'a> {
            match field {
                "weight" => SlotMut::One(&mut l.gamma),
                _ => SlotMut::One(l.beta.as_mut().expect("LayerNorm with bias")),
            }
        }
        match module {
            "tok_emb" => SlotMut::Two(&mut self.tok_emb.weight),
            "pos_emb" => SlotMut::Two(&mut self.pos_emb.weight),
            "ln_f" => ln(&mut self.ln_f, field),
            "head" => linear_slot_mut(&mut self.head, field),
            _ => {
                let rest = module
                    .strip_prefix("blocks.")
                    .expect("a transformer parameter");
                let (i, sub) = rest.split_once('.').expect("blocks.{i}.…");
                let b = &mut self.blocks[i.parse::<usize>().expect("block index")];
                match sub {
                    "ln1" => ln(&mut b.ln1, field),
                    "ln2" => ln(&mut b.ln2, field),
                    "attn.q" => linear_slot_mut(&mut b.attn.q, field),
                    "attn.k" => linear_slot_mut(&mut b.attn.k, field),
                    "attn.v" => linear_slot_mut(&mut b.attn.v, field),
                    "attn.out" => linear_slot_mut(&mut b.attn.out, field),
                    "mlp.fc1" => linear_slot_mut(&mut b.mlp.fc1, field),
                    "mlp.fc2" => linear_slot_mut(&mut b.mlp.fc2, field),
                    other => panic!("blocks.{i}.{other} is not a transformer module"),
                }
            }
        }
    }
}
