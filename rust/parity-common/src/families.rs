//! The configs of the built-in model families that both runners port (`candle-parity` and
//! `burn-parity`, each in its `families` module): what a family's port reads from
//! [`crate::spec::ModelSpec::config`], and the PyTorch state_dict the family has, in order
//! (the same lists as `scripts/parity/core/models.py`, `model_params`: the run spec carries
//! them, so a runner never needs them; tests build their specs from them).
//!
//! A family ported by one runner only may keep its config beside its port instead.

use serde::Deserialize;

use crate::model::ParamSpec;

/// Element-wise activation between layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// max(x, 0); its derivative at 0 is taken as 0 by PyTorch and candle.
    Relu,
}

impl Activation {
    /// Its name in module paths (`relu`), as PyTorch's model names it.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
        }
    }
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

/// The fault a built-in port applies in its forward pass, as
/// [`crate::spec::ModelSpec::port_config`] hands it over (`"fault": "transposed_weight"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelFault {
    /// None: the model as specified.
    #[default]
    None,
    /// Every square MLP weight `[n, n]` is used as `W` instead of `Wᵀ` (y = x·W + b):
    /// [`crate::fault::Fault::TransposedWeight`].
    TransposedWeight,
}

/// Parses a built-in family's config (`what`: its family name, for the message).
///
/// # Errors
/// A config that is not this family's (an unknown, missing or mistyped key, named).
pub fn parse<T: serde::de::DeserializeOwned>(
    what: &str,
    config: &serde_json::Value,
) -> anyhow::Result<T> {
    serde_json::from_value(config.clone())
        .map_err(|e| anyhow::anyhow!("the {what} family's config {config}: {e}"))
}

/// `mlp`: `fc1 … fcN`, Linear layers `sizes[i] → sizes[i+1]` with the activation between
/// them (none after the last). Input `[batch, sizes[0]]`, output `[batch, sizes[N]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlpConfig {
    /// Layer widths, input first; at least two entries.
    pub sizes: Vec<usize>,
    /// Hidden activation.
    pub activation: Activation,
    /// The forward-pass fault of a detection-power run.
    #[serde(default)]
    pub fault: ModelFault,
}

impl MlpConfig {
    /// `fc{i}.weight` `[sizes[i], sizes[i−1]]` and `fc{i}.bias` `[sizes[i]]`, layer by layer.
    pub fn params(&self) -> Vec<ParamSpec> {
        self.sizes
            .windows(2)
            .enumerate()
            .flat_map(|(i, w)| {
                [
                    param(format!("fc{}.weight", i + 1), vec![w[1], w[0]]),
                    param(format!("fc{}.bias", i + 1), vec![w[1]]),
                ]
            })
            .collect()
    }

    /// Whether the MLP has a square weight (two equal consecutive sizes), which the
    /// transposed-weight fault needs.
    pub fn has_square_weight(&self) -> bool {
        self.sizes.windows(2).any(|w| w[0] == w[1])
    }
}

/// `cnn1d`: `conv` (Conv1d `in_channels → channels`, kernel `kernel`, stride 1, no padding)
/// → activation → flatten → `fc` (Linear `channels·(length−kernel+1) → classes`). Input
/// `[batch, in_channels, length]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CnnConfig {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels of the convolution.
    pub channels: usize,
    /// Kernel width.
    pub kernel: usize,
    /// Input length.
    pub length: usize,
    /// Output features of `fc`.
    pub classes: usize,
    /// Activation after the convolution.
    pub activation: Activation,
    /// How the runner computes the convolution (see [`ConvImpl`]).
    pub conv_impl: ConvImpl,
}

impl CnnConfig {
    /// The convolution's output length, `length − kernel + 1`.
    pub fn out_len(&self) -> usize {
        self.length + 1 - self.kernel
    }

    /// `conv.weight` `[channels, in_channels, kernel]`, `conv.bias`, `fc.weight`
    /// `[classes, channels·out_len]`, `fc.bias`.
    pub fn params(&self) -> Vec<ParamSpec> {
        vec![
            param(
                "conv.weight".into(),
                vec![self.channels, self.in_channels, self.kernel],
            ),
            param("conv.bias".into(), vec![self.channels]),
            param(
                "fc.weight".into(),
                vec![self.classes, self.channels * self.out_len()],
            ),
            param("fc.bias".into(), vec![self.classes]),
        ]
    }
}

/// `transformer`: a GPT-style decoder. Token embedding `tok_emb` `[vocab, d_model]` plus
/// learned position embedding `pos_emb` `[seq_len, d_model]`; `blocks` pre-LayerNorm blocks
/// `blocks.{i}`: `ln1` → causal multi-head self-attention (`attn.q`, `attn.k`, `attn.v`,
/// `attn.out`, each Linear d→d with bias except `attn.k`: a key bias adds the same amount to
/// every score of a query, which the softmax cancels, so its exact gradient is 0 and its
/// computed one pure rounding noise that Adam's 1/(√v̂ + ε) scales up to learning-rate-sized
/// steps of random sign; scores q·kᵀ multiplied by 1/√d_head, future keys set to −∞, softmax
/// over the keys) → residual add → `ln2` → `mlp.fc1` (d→4d) → GELU → `mlp.fc2` (4d→d) →
/// residual add; then `ln_f` and `head` (d→vocab, no bias, not tied to `tok_emb`). Layer
/// norms have ε = 1e-5 and biased variance. Input: token ids `[batch, seq_len]`; output:
/// logits `[batch, seq_len, vocab]`; the loss is the next-token cross-entropy, mean over
/// batch × seq_len.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformerConfig {
    /// Vocabulary size V.
    pub vocab: usize,
    /// Model width d.
    pub d_model: usize,
    /// Attention heads H (d = H·dh).
    pub heads: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// Maximum sequence length T (the position embedding's rows).
    pub seq_len: usize,
    /// How layer norm is computed (see [`LayerNormImpl`]).
    pub layer_norm: LayerNormImpl,
    /// How the attention softmax is computed (see [`SoftmaxImpl`]).
    pub softmax: SoftmaxImpl,
    /// Which GELU (see [`GeluImpl`]).
    pub gelu: GeluImpl,
}

impl TransformerConfig {
    /// Parses the family's config and checks what its fields must satisfy.
    ///
    /// # Errors
    /// As [`parse`], or `d_model` not a positive multiple of `heads`.
    pub fn from_config(config: &serde_json::Value) -> anyhow::Result<Self> {
        let c: Self = parse("transformer", config)?;
        if c.heads == 0 || !c.d_model.is_multiple_of(c.heads) {
            anyhow::bail!(
                "transformer: d_model {} is not a multiple of heads {}",
                c.d_model,
                c.heads
            );
        }
        Ok(c)
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

    /// `tok_emb.weight` `[V, d]`, `pos_emb.weight` `[T, d]`; per block `blocks.{i}.`
    /// `ln1.weight`, `ln1.bias`, `attn.{q,k,v,out}.weight` `[d, d]` with `.bias` `[d]`
    /// (none for `attn.k`), `ln2.weight`, `ln2.bias`, `mlp.fc1.weight` `[4d, d]`,
    /// `mlp.fc1.bias`, `mlp.fc2.weight` `[d, 4d]`, `mlp.fc2.bias`; then `ln_f.weight`,
    /// `ln_f.bias` and `head.weight` `[V, d]`.
    pub fn params(&self) -> Vec<ParamSpec> {
        let d = self.d_model;
        let mut out = vec![
            param("tok_emb.weight".into(), vec![self.vocab, d]),
            param("pos_emb.weight".into(), vec![self.seq_len, d]),
        ];
        for i in 0..self.blocks {
            let b = |s: &str| format!("blocks.{i}.{s}");
            out.push(param(b("ln1.weight"), vec![d]));
            out.push(param(b("ln1.bias"), vec![d]));
            for m in ["q", "k", "v", "out"] {
                out.push(param(b(&format!("attn.{m}.weight")), vec![d, d]));
                // No key bias: softmax over the keys cancels it (see the type's docs).
                if m != "k" {
                    out.push(param(b(&format!("attn.{m}.bias")), vec![d]));
                }
            }
            out.push(param(b("ln2.weight"), vec![d]));
            out.push(param(b("ln2.bias"), vec![d]));
            out.push(param(b("mlp.fc1.weight"), vec![4 * d, d]));
            out.push(param(b("mlp.fc1.bias"), vec![4 * d]));
            out.push(param(b("mlp.fc2.weight"), vec![d, 4 * d]));
            out.push(param(b("mlp.fc2.bias"), vec![d]));
        }
        out.push(param("ln_f.weight".into(), vec![d]));
        out.push(param("ln_f.bias".into(), vec![d]));
        out.push(param("head.weight".into(), vec![self.vocab, d]));
        out
    }

    /// The intermediates a port of this family names with its taps, in forward order, each
    /// `<module path>.out` as a forward hook on that module would name its output, the
    /// attention's inner ops named as modules of `attn` (`scripts/parity/localise/walk.py`,
    /// `transformer_dataflow`, gives the same names with what each is computed from):
    ///
    /// * `tok_emb.out` `[B, T, d]`, `pos_emb.out` `[T, d]` (their sum is block 0's input);
    /// * per block `blocks.{i}.`: `ln1.out`; `attn.q.out`, `attn.k.out`, `attn.v.out` (each
    ///   `[B, T, d]`, before the split into heads); `attn.scores.out` (`(q·kᵀ)·(1/√dh)`
    ///   before the causal mask, `[B, H, T, T]`); `attn.softmax.out` (the attention weights,
    ///   mask and softmax applied, `[B, H, T, T]`); `attn.context.out` (weights·v, heads
    ///   merged, `[B, T, d]`); `attn.out.out`; `ln2.out`; `mlp.fc1.out` `[B, T, 4d]`;
    ///   `mlp.gelu.out` `[B, T, 4d]`; `mlp.fc2.out`; then `blocks.{i}.out`, the residual
    ///   stream after the block;
    /// * `ln_f.out`, `head.out` (the logits `[B, T, V]`).
    pub fn tap_names(&self) -> Vec<String> {
        let mut out = vec!["tok_emb.out".to_string(), "pos_emb.out".to_string()];
        for i in 0..self.blocks {
            out.extend(
                [
                    "ln1",
                    "attn.q",
                    "attn.k",
                    "attn.v",
                    "attn.scores",
                    "attn.softmax",
                    "attn.context",
                    "attn.out",
                    "ln2",
                    "mlp.fc1",
                    "mlp.gelu",
                    "mlp.fc2",
                ]
                .iter()
                .map(|m| format!("blocks.{i}.{m}.out")),
            );
            out.push(format!("blocks.{i}.out"));
        }
        out.extend(["ln_f.out".to_string(), "head.out".to_string()]);
        out
    }
}

fn param(name: String, shape: Vec<usize>) -> ParamSpec {
    ParamSpec { name, shape }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlp_params_follow_the_state_dict() {
        let m = MlpConfig {
            sizes: vec![8, 16, 4],
            activation: Activation::Relu,
            fault: ModelFault::None,
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
        assert!(!m.has_square_weight());
    }

    #[test]
    fn cnn_fc_input_is_channels_times_output_length() {
        let c: CnnConfig = parse(
            "cnn1d",
            &serde_json::json!({"in_channels": 1, "channels": 4, "kernel": 5, "length": 16,
                                "classes": 3, "activation": "relu", "conv_impl": "conv2d"}),
        )
        .unwrap();
        let p = c.params();
        assert_eq!(p[2].name, "fc.weight");
        assert_eq!(p[2].shape, vec![3, 48]);
    }

    #[test]
    fn a_config_of_another_family_is_refused_by_name() {
        let err = parse::<MlpConfig>(
            "mlp",
            &serde_json::json!({"sizes": [2, 1], "activation": "relu", "kernel": 3}),
        )
        .unwrap_err();
        assert!(
            format!("{err}").contains("kernel") && format!("{err}").contains("mlp"),
            "{err}"
        );
        let err = TransformerConfig::from_config(&serde_json::json!({
            "vocab": 8, "d_model": 6, "heads": 4, "blocks": 1, "seq_len": 4,
            "layer_norm": "composed", "softmax": "generic", "gelu": "erf"}))
        .unwrap_err();
        assert!(format!("{err}").contains("multiple of heads"), "{err}");
    }

    #[test]
    fn transformer_params_are_a_gpt_state_dict() {
        let m = TransformerConfig {
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
        let taps = m.tap_names();
        assert_eq!(taps.len(), 2 + 2 * 13 + 2);
        assert_eq!(taps[12], "blocks.0.mlp.gelu.out");
        // Every parameter's module has its output among the names (the walk gives each
        // parameter's gradient from its module's output gradient).
        for p in m.params() {
            let module = p.name.rsplit_once('.').unwrap().0;
            assert!(taps.contains(&format!("{module}.out")), "{}", p.name);
        }
    }
}
