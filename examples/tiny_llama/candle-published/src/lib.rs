//! candle-transformers 0.11.0's published llama (`candle_transformers::models::llama`) as it
//! is, behind the glue the parity workflow's own-model runner needs (docs/own-model.md,
//! "The worked examples"): [`PublishedLlama`].
//!
//! What the published code does, and so what this comparison shows:
//!
//! * Its `RmsNorm` (candle-transformers' `with_tracing::RmsNorm` → candle-nn's `RmsNorm`)
//!   takes candle-nn's fused `ops::rms_norm` on a contiguous input, its attention
//!   `ops::softmax_last_dim`, its rotary embedding `rotary_emb::rope`: in candle-nn 0.11.0
//!   all three are made with `apply_op*_no_bwd`, so their outputs are new leaves of the
//!   graph and `loss.backward()` stops there without an error (upstream candle issues
//!   #2168 and #3569). The final norm (`model.norm`) is fused too, so the gradient of the
//!   loss reaches `lm_head.weight` only: every other parameter never receives a gradient
//!   and is never updated; the workflow names them (`never_updated`).
//! * The fused `rms_norm` has a float32 CPU kernel and none for float64 ("unsupported
//!   dtype for rmsnorm F64"): a float64 run fails at its first forward pass.
//! * The attention is computed in float32 whatever the model's dtype, and the logits are
//!   returned as float32.
//! * `Llama::forward(x, index_pos, cache)` returns the logits of the last position only,
//!   `[B, V]`, while PyTorch's `LlamaForCausalLM` returns `[B, T, V]` and the workflow's
//!   loss is the cross-entropy over every position. The glue runs the published forward
//!   on each prefix `x[:, ..=t]` (a fresh `Cache` without KV caching each time, so
//!   nothing carries over) and stacks the last-position logits: under the causal mask
//!   they are the logits of position `t` of the whole sequence, so the loss is the same
//!   all-position loss as PyTorch's, computed with T forward passes. Before any update
//!   (step 1) the two losses agree to rounding; what differs from there on is the
//!   training, which the missing gradients cut short.
//!
//! The config is transformers' `config.to_dict()`, read with candle-transformers'
//! `LlamaConfig` deserialisation and `into_config(false)` (no flash attention); the
//! weights are asked for by the published code's own names, which are the state_dict keys.

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig};
use parity_common::candle::{CandleModel, Taps};

/// candle-transformers' `Llama` and what its forward pass needs (module docs).
pub struct PublishedLlama {
    llama: Llama,
    config: Config,
    dtype: DType,
    device: Device,
}

impl CandleModel for PublishedLlama {
    /// `config`: transformers' `LlamaConfig.to_dict()`, deserialised as candle-transformers'
    /// `LlamaConfig` (unknown keys ignored; `rope_theta` a top-level key, else 10000) and
    /// turned into its `Config` without flash attention; then `Llama::load(vb, &config)`.
    /// Errors: a config `LlamaConfig` cannot read, naming the field; a weight the fixture
    /// lacks (the published loader panics on a layer's, which the runner reports as an
    /// error).
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let cfg: LlamaConfig = serde_json::from_value(config.clone())
            .context("reading the model config as candle-transformers' LlamaConfig")?;
        let config = cfg.into_config(false);
        let llama = Llama::load(vb.clone(), &config)?;
        Ok(Self {
            llama,
            config,
            dtype: vb.dtype(),
            device: vb.device().clone(),
        })
    }

    /// `x`: `[B, T]` token ids (U32) → logits `[B, T, V]` in the run dtype: position `t`'s
    /// are `Llama::forward` of the prefix `x[:, ..=t]` (its last-position logits, float32,
    /// converted to the run dtype), each prefix with a new `Cache` (no KV cache, index 0).
    /// Tapped: `lm_head` (the stacked logits; the published modules expose nothing else).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let (_, t) = x.dims2()?;
        let mut logits = Vec::with_capacity(t);
        for end in 1..=t {
            let mut cache = Cache::new(false, self.dtype, &self.config, &self.device)?;
            let prefix = x.narrow(1, 0, end)?.contiguous()?;
            logits.push(self.llama.forward(&prefix, 0, &mut cache)?);
        }
        let logits = Tensor::stack(&logits, 1)?.to_dtype(self.dtype)?;
        Ok(taps.tap("lm_head", &logits)?)
    }
}
