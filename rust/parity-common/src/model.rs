//! The model families a run spec names ([`Model`]), their parameters in PyTorch state_dict
//! order ([`Model::params`], each a [`ParamSpec`]) and the per-family choices of how an op is
//! computed. Part of the run spec ([`crate::spec`] re-exports every type);
//! `scripts/parity/core/models.py` declares the same parameter lists. A user's own model
//! ([`Model::Own`]) declares none: its parameters come from the PyTorch model itself
//! (`scripts/parity/plan/own.py`), and the run spec carries them.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One parameter: state_dict key and shape in PyTorch layout.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// state_dict key, e.g. `fc1.weight`.
    pub name: String,
    /// Shape, e.g. `[16, 8]` for a Linear 8→16 weight.
    pub shape: Vec<usize>,
}

/// Element-wise activation between layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// max(x, 0); its derivative at 0 is taken as 0 by PyTorch and candle.
    Relu,
}

/// How a runner computes the 1-D convolution. candle-parity does either; burn-parity calls
/// burn's own `conv1d` and accepts `Conv1d` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvImpl {
    /// `conv2d` on `[b, c, 1, l]` with a `[o, c, 1, k]` kernel (the study's workaround).
    Conv2d,
    /// `conv1d` directly (candle 0.11.0's kernel gradient is wrong when batch > 1 and
    /// output channels > 1).
    Conv1d,
}

/// How a transformer's layer norm is computed (candle-parity; burn-parity uses burn-nn's
/// `LayerNorm` and accepts `Composed` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerNormImpl {
    /// Composed of differentiable tensor ops (candle-nn's `ops::layer_norm_slow`):
    /// (x − mean) / √(var + ε) · γ + β, the biased variance over the last dimension.
    Composed,
    /// candle-nn's fused `ops::layer_norm` (what `candle_nn::LayerNorm::forward` calls on a
    /// contiguous input): candle 0.11 implements no backward for it.
    Fused,
}

/// How attention scores are normalised over the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SoftmaxImpl {
    /// exp(x − max) / Σ exp(x − max) from differentiable ops (candle-nn's `ops::softmax`).
    Generic,
    /// candle-nn's fused `ops::softmax_last_dim` (no backward in candle 0.11).
    LastDim,
}

/// The GELU of a transformer's MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeluImpl {
    /// x·Φ(x) = x·½·(1 + erf(x/√2)), PyTorch's default `F.gelu`. candle-parity composes it
    /// from `erf` (whose backward, 2/√π·e^(−x²), is exact); burn-parity calls burn's
    /// `activation::gelu`, whatever its backward computes.
    Erf,
    /// candle's own `gelu_erf` op: the same forward, but its backward uses 0.398942 for
    /// 1/√(2π) (candle-core 0.11.0 `backprop.rs`), a relative error of 7e-7 in that term.
    GeluErf,
    /// The tanh approximation 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) (candle's `gelu`).
    Tanh,
}

/// What one sample of an own model's data is ([`Model::Own`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnInput {
    /// Token ids: the fixture's `x` is int64 `[batches, B, T]`; the port's forward receives
    /// `[B, T]` as `DType::U32`.
    Tokens,
    /// Floats: the fixture's `x` is float32 `[batches, B, …]`; the port's forward receives
    /// `[B, …]` in the run dtype.
    Float,
}

/// What an own model is trained against ([`Model::Own`]), and so its loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnTarget {
    /// The next tokens: `y` int64 `[batches, B, T]`; the output is logits `[B, T, V]` and the
    /// loss the cross-entropy over `[B·T, V]` (mean), as PyTorch's `F.cross_entropy` of the
    /// flattened logits.
    Tokens,
    /// Class labels: `y` int64 `[batches, B]`; the output is logits `[B, C]`, the loss the
    /// cross-entropy (mean).
    Classes,
    /// Float targets: `y` float32 `[batches, B, …]`; the output has the target's shape, the
    /// loss the MSE (mean over every element).
    Float,
}

/// The model family and its shapes. Parameter names follow PyTorch's state_dict.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "family", rename_all = "snake_case", deny_unknown_fields)]
pub enum Model {
    /// `fc1 … fcN`: Linear layers `sizes[i] → sizes[i+1]` with the activation between them
    /// (none after the last). Input `[batch, sizes[0]]`, output `[batch, sizes[N]]`.
    Mlp {
        /// Layer widths, input first; at least two entries.
        sizes: Vec<usize>,
        /// Hidden activation.
        activation: Activation,
    },
    /// `conv` (Conv1d `in_channels → channels`, kernel `kernel`, stride 1, no padding) →
    /// activation → flatten → `fc` (Linear `channels·(length−kernel+1) → classes`).
    /// Input `[batch, in_channels, length]`.
    Cnn1d {
        /// Input channels.
        in_channels: usize,
        /// Output channels of the convolution.
        channels: usize,
        /// Kernel width.
        kernel: usize,
        /// Input length.
        length: usize,
        /// Output features of `fc`.
        classes: usize,
        /// Activation after the convolution.
        activation: Activation,
        /// How the runner computes the convolution (see [`ConvImpl`]).
        conv_impl: ConvImpl,
    },
    /// A GPT-style decoder: token embedding `tok_emb` `[vocab, d_model]` plus learned
    /// position embedding `pos_emb` `[seq_len, d_model]`; `blocks` pre-LayerNorm blocks
    /// `blocks.{i}`: `ln1` → causal multi-head self-attention (`attn.q`, `attn.k`, `attn.v`,
    /// `attn.out`, each Linear d→d with bias except `attn.k`: a key bias adds the same
    /// amount to every score of a query, which the softmax cancels, so its exact gradient is
    /// 0 and its computed one pure rounding noise that Adam's 1/(√v̂ + ε) scales up to
    /// learning-rate-sized steps of random sign; scores q·kᵀ multiplied by 1/√d_head, future
    /// keys set to −∞, softmax over the keys) → residual add → `ln2` → `mlp.fc1` (d→4d) →
    /// GELU → `mlp.fc2` (4d→d) → residual add; then `ln_f` and `head` (d→vocab, no bias,
    /// not tied to `tok_emb`). Layer norms have ε = 1e-5 and biased variance. Input: token ids
    /// `[batch, seq_len]` int64; output: logits `[batch, seq_len, vocab]`; the loss is the
    /// cross-entropy of every position against the next token, mean over batch × seq_len.
    Transformer {
        /// Vocabulary size V.
        vocab: usize,
        /// Model width d.
        d_model: usize,
        /// Attention heads (d_model is a multiple of heads).
        heads: usize,
        /// Number of blocks.
        blocks: usize,
        /// Sequence length T (the position embedding's rows).
        seq_len: usize,
        /// How layer norm is computed (see [`LayerNormImpl`]).
        layer_norm: LayerNormImpl,
        /// How the attention softmax is computed (see [`SoftmaxImpl`]).
        softmax: SoftmaxImpl,
        /// Which GELU (see [`GeluImpl`]).
        gelu: GeluImpl,
    },
    /// A user's own model, ported to a Rust framework by the user (docs/own-model.md;
    /// `parity_common::own`). Its parameters are the run spec's `params` (PyTorch
    /// state_dict order, each tied tensor once under the name it is recorded under), which
    /// the workflow reads from the PyTorch model; this variant says what the port receives.
    Own {
        /// Handed verbatim to the port's `build`: a `transformers` config's `to_dict()` (as
        /// `config.json` holds it) or a factory's keyword arguments.
        config: serde_json::Value,
        /// What a sample's input is.
        input: OwnInput,
        /// What the model is trained against (and so the loss).
        target: OwnTarget,
        /// Tied parameters: alias → the state_dict key it is recorded under (an LM head
        /// sharing the embedding: `{"lm_head.weight": "model.embed_tokens.weight"}`).
        tied: BTreeMap<String, String>,
        /// Buffers the fixture hands the port (float32 there, the run dtype in the port),
        /// never trained or recorded.
        buffers: Vec<ParamSpec>,
        /// The Rust side's rename table: the name the port asks for → its state_dict key.
        rename: BTreeMap<String, String>,
    },
}

impl Model {
    /// The parameters this family declares, in state_dict order, with PyTorch shapes
    /// (`fc1.weight` is `[out, in]`; `conv.weight` is `[out, in, k]`). The same list as
    /// `scripts/parity/core/models.py` `model_params`; every runner refuses a spec whose
    /// `params` differ. An own model ([`Model::Own`]) declares none (empty): its list is
    /// the run spec's, from the PyTorch model.
    pub fn params(&self) -> Vec<ParamSpec> {
        let p = |name: String, shape: Vec<usize>| ParamSpec { name, shape };
        match self {
            Model::Mlp { sizes, .. } => sizes
                .windows(2)
                .enumerate()
                .flat_map(|(i, w)| {
                    [
                        p(format!("fc{}.weight", i + 1), vec![w[1], w[0]]),
                        p(format!("fc{}.bias", i + 1), vec![w[1]]),
                    ]
                })
                .collect(),
            Model::Cnn1d {
                in_channels,
                channels,
                kernel,
                length,
                classes,
                ..
            } => {
                let out_len = length + 1 - kernel;
                vec![
                    p("conv.weight".into(), vec![*channels, *in_channels, *kernel]),
                    p("conv.bias".into(), vec![*channels]),
                    p("fc.weight".into(), vec![*classes, channels * out_len]),
                    p("fc.bias".into(), vec![*classes]),
                ]
            }
            Model::Transformer {
                vocab,
                d_model,
                blocks,
                seq_len,
                ..
            } => {
                let d = *d_model;
                let mut out = vec![
                    p("tok_emb.weight".into(), vec![*vocab, d]),
                    p("pos_emb.weight".into(), vec![*seq_len, d]),
                ];
                for i in 0..*blocks {
                    let b = |s: &str| format!("blocks.{i}.{s}");
                    out.push(p(b("ln1.weight"), vec![d]));
                    out.push(p(b("ln1.bias"), vec![d]));
                    for m in ["q", "k", "v", "out"] {
                        out.push(p(b(&format!("attn.{m}.weight")), vec![d, d]));
                        // No key bias: softmax over the keys cancels it (see the docs above).
                        if m != "k" {
                            out.push(p(b(&format!("attn.{m}.bias")), vec![d]));
                        }
                    }
                    out.push(p(b("ln2.weight"), vec![d]));
                    out.push(p(b("ln2.bias"), vec![d]));
                    out.push(p(b("mlp.fc1.weight"), vec![4 * d, d]));
                    out.push(p(b("mlp.fc1.bias"), vec![4 * d]));
                    out.push(p(b("mlp.fc2.weight"), vec![d, 4 * d]));
                    out.push(p(b("mlp.fc2.bias"), vec![d]));
                }
                out.push(p("ln_f.weight".into(), vec![d]));
                out.push(p("ln_f.bias".into(), vec![d]));
                out.push(p("head.weight".into(), vec![*vocab, d]));
                out
            }
            Model::Own { .. } => Vec::new(),
        }
    }

    /// Whether this is a user's own model ([`Model::Own`]).
    pub fn is_own(&self) -> bool {
        matches!(self, Model::Own { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_params_follow_the_state_dict() {
        let m = Model::Mlp {
            sizes: vec![8, 16, 4],
            activation: Activation::Relu,
        };
        let names: Vec<(String, Vec<usize>)> =
            m.params().into_iter().map(|p| (p.name, p.shape)).collect();
        assert_eq!(
            names,
            vec![
                ("fc1.weight".to_string(), vec![16, 8]),
                ("fc1.bias".to_string(), vec![16]),
                ("fc2.weight".to_string(), vec![4, 16]),
                ("fc2.bias".to_string(), vec![4]),
            ]
        );
        let total: usize = m
            .params()
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum();
        assert_eq!(total, 212, "the study's A3 MLP has 212 parameters");
    }

    #[test]
    fn cnn_fc_input_is_channels_times_output_length() {
        let m = Model::Cnn1d {
            in_channels: 1,
            channels: 4,
            kernel: 5,
            length: 16,
            classes: 3,
            activation: Activation::Relu,
            conv_impl: ConvImpl::Conv2d,
        };
        let p = m.params();
        assert_eq!(p[2].name, "fc.weight");
        assert_eq!(p[2].shape, vec![3, 48]);
    }

    #[test]
    fn transformer_params_are_a_gpt_state_dict() {
        let m = Model::Transformer {
            vocab: 32,
            d_model: 16,
            heads: 2,
            blocks: 2,
            seq_len: 8,
            layer_norm: LayerNormImpl::Composed,
            softmax: SoftmaxImpl::Generic,
            gelu: GeluImpl::Erf,
        };
        let p = m.params();
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            &names[..4],
            [
                "tok_emb.weight",
                "pos_emb.weight",
                "blocks.0.ln1.weight",
                "blocks.0.ln1.bias"
            ]
        );
        assert_eq!(names[4], "blocks.0.attn.q.weight");
        assert_eq!(names[names.len() - 1], "head.weight");
        assert_eq!(p.len(), 2 + 2 * 15 + 3);
        let total: usize = p.iter().map(|p| p.shape.iter().product::<usize>()).sum();
        // 2 embeddings (512 + 128), per block 4·256 + 3·16 (no key bias) + 2·2·16 +
        // (1024+64) + (1024+16), final norm 32, head 512.
        assert_eq!(
            total,
            512 + 128 + 2 * (4 * 256 + 48 + 64 + 1088 + 1040) + 32 + 512
        );
    }
}
