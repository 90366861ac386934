//! A candle port of transformers' `LlamaForCausalLM` (5.23.0, eager attention, no cache) for
//! the parity workflow's own-model runner (docs/own-model.md, "The worked examples").
//!
//! It reads its config as candle-transformers 0.11.0 does (`LlamaConfig`, deserialised from
//! the `config.to_dict()` the workflow hands over, then `Config`) and asks for the weights by
//! the names candle-transformers' llama uses, which are the state_dict keys
//! (`model.embed_tokens.weight` `[V, H]`, `model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`,
//! `model.layers.{i}.mlp.{gate,up,down}_proj.weight`, `model.layers.{i}.input_layernorm.weight`,
//! `model.layers.{i}.post_attention_layernorm.weight`, `model.norm.weight` `[H]`,
//! `lm_head.weight` `[V, H]`). Unlike candle-transformers' `Llama` it returns the logits of
//! every position, has no cache, and composes every op from differentiable candle ops
//! ([`ops`]) with transformers' float32 casts; each module's output is tapped under its
//! PyTorch module path.
//!
//! The rotary base is `LlamaConfig::rope_theta`, a top-level key defaulting to 10000;
//! transformers 5 writes it as `rope_parameters.rope_theta`, so a config with another base
//! reaches this port as 10000 (the workflow's `llama_rope_theta` experiment shows it).

pub mod ops;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Embedding, Linear, Module, VarBuilder};
use candle_transformers::models::llama::{Config, LlamaConfig};
use parity_common::candle::{CandleModel, Taps};

/// `LlamaAttention`: q, k, v, o projections without bias, grouped-query heads.
struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// `LlamaMLP`: `down_proj(silu(gate_proj(x)) · up_proj(x))`, no bias.
struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    down_proj: Linear,
}

/// `LlamaDecoderLayer`: pre-norm attention and MLP, each with a residual connection.
struct Layer {
    input_layernorm: Tensor,
    self_attn: Attention,
    post_attention_layernorm: Tensor,
    mlp: Mlp,
}

/// The port of `LlamaForCausalLM` (module docs).
pub struct TinyLlama {
    embed_tokens: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    config: Config,
    dtype: DType,
    device: Device,
}

/// A bias-free linear layer at `vb`'s prefix: weight `[out, in]`, PyTorch's layout.
fn linear(inputs: usize, outputs: usize, vb: VarBuilder) -> Result<Linear> {
    Ok(candle_nn::linear_no_bias(inputs, outputs, vb)?)
}

impl Attention {
    fn load(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let head_dim = cfg.hidden_size / cfg.num_attention_heads;
        let (h, q, kv) = (
            cfg.hidden_size,
            cfg.num_attention_heads * head_dim,
            cfg.num_key_value_heads * head_dim,
        );
        Ok(Self {
            q_proj: linear(h, q, vb.pp("q_proj"))?,
            k_proj: linear(h, kv, vb.pp("k_proj"))?,
            v_proj: linear(h, kv, vb.pp("v_proj"))?,
            o_proj: linear(q, h, vb.pp("o_proj"))?,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim,
        })
    }

    /// `eager_attention_forward` with rotary q and k: `x` `[B, T, H]` → `[B, T, H]`;
    /// `cos`, `sin` `[T, head_dim]`, `mask` `[T, T]`, all in the run dtype.
    fn forward(
        &self,
        x: &Tensor,
        (cos, sin, mask): (&Tensor, &Tensor, &Tensor),
        path: &str,
        taps: &mut Taps,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let proj = |l: &Linear, name: &str, taps: &mut Taps| -> Result<Tensor> {
            Ok(taps.tap(&format!("{path}.{name}"), &l.forward(x)?)?)
        };
        let q = proj(&self.q_proj, "q_proj", taps)?;
        let k = proj(&self.k_proj, "k_proj", taps)?;
        let v = proj(&self.v_proj, "v_proj", taps)?;
        let heads = |y: Tensor, n: usize| -> Result<Tensor> {
            Ok(y.reshape((b, t, n, self.head_dim))?.transpose(1, 2)?)
        };
        let q = ops::apply_rotary(&heads(q, self.heads)?, cos, sin)?;
        let k = ops::apply_rotary(&heads(k, self.kv_heads)?, cos, sin)?;
        let v = heads(v, self.kv_heads)?;
        let groups = self.heads / self.kv_heads;
        let k = candle_transformers::utils::repeat_kv(k.contiguous()?, groups)?;
        let v = candle_transformers::utils::repeat_kv(v.contiguous()?, groups)?;
        let scaling = ops::scalar((self.head_dim as f64).powf(-0.5), x.dtype(), x.device())?;
        let scores = q
            .contiguous()?
            .matmul(&k.t()?.contiguous()?)?
            .broadcast_mul(&scaling)?
            .broadcast_add(mask)?;
        let weights = ops::softmax_f32(&scores)?;
        let y = weights.matmul(&v)?.transpose(1, 2)?.reshape((b, t, ()))?;
        let out = taps.tap(&format!("{path}.o_proj"), &self.o_proj.forward(&y)?)?;
        Ok(taps.tap(path, &out)?)
    }
}

impl Mlp {
    fn load(cfg: &Config, vb: VarBuilder) -> Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        Ok(Self {
            gate_proj: linear(h, i, vb.pp("gate_proj"))?,
            up_proj: linear(h, i, vb.pp("up_proj"))?,
            down_proj: linear(i, h, vb.pp("down_proj"))?,
        })
    }

    fn forward(&self, x: &Tensor, path: &str, taps: &mut Taps) -> Result<Tensor> {
        let gate = taps.tap(&format!("{path}.gate_proj"), &self.gate_proj.forward(x)?)?;
        let act = taps.tap(&format!("{path}.act_fn"), &gate.silu()?)?;
        let up = taps.tap(&format!("{path}.up_proj"), &self.up_proj.forward(x)?)?;
        let down = self.down_proj.forward(&(act * up)?)?;
        let down = taps.tap(&format!("{path}.down_proj"), &down)?;
        Ok(taps.tap(path, &down)?)
    }
}

impl CandleModel for TinyLlama {
    /// `config`: transformers' `LlamaConfig.to_dict()`, read through candle-transformers'
    /// `LlamaConfig` (so `rope_theta` is the top-level key or 10000, see the module docs).
    /// Errors: a config `LlamaConfig` cannot read (the message names the field), a weight
    /// the fixture lacks.
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let cfg: LlamaConfig = serde_json::from_value(config.clone())
            .context("reading the model config as candle-transformers' LlamaConfig")?;
        let cfg = cfg.into_config(false);
        let h = cfg.hidden_size;
        let embed_tokens = candle_nn::embedding(cfg.vocab_size, h, vb.pp("model.embed_tokens"))?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let vb = vb.pp(format!("model.layers.{i}"));
                Ok(Layer {
                    input_layernorm: vb.get(h, "input_layernorm.weight")?,
                    self_attn: Attention::load(&cfg, vb.pp("self_attn"))?,
                    post_attention_layernorm: vb.get(h, "post_attention_layernorm.weight")?,
                    mlp: Mlp::load(&cfg, vb.pp("mlp"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let lm_head = if cfg.tie_word_embeddings {
            Linear::new(embed_tokens.embeddings().clone(), None)
        } else {
            linear(h, cfg.vocab_size, vb.pp("lm_head"))?
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm: vb.get(h, "model.norm.weight")?,
            lm_head,
            dtype: vb.dtype(),
            device: vb.device().clone(),
            config: cfg,
        })
    }

    /// `x`: `[B, T]` token ids (U32) → logits `[B, T, V]` of every position, in the run
    /// dtype; every module of the PyTorch model tapped under its path (`model.rotary_emb`:
    /// the cos table `[1, T, head_dim]`, recorded only: as in PyTorch, where the tables are
    /// made under `no_grad`, no gradient flows through it).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let (_, t) = x.dims2()?;
        let cfg = &self.config;
        let head_dim = cfg.hidden_size / cfg.num_attention_heads;
        let mut h = taps.tap("model.embed_tokens", &self.embed_tokens.forward(x)?)?;
        let (cos, sin) = ops::rotary_tables(cfg.rope_theta, head_dim, t, self.dtype, &self.device)?;
        // Recorded for the comparison, not continued with: PyTorch's tables carry no gradient.
        taps.tap("model.rotary_emb", &cos.unsqueeze(0)?)?;
        let mask = ops::causal_mask(t, self.dtype, &self.device)?;
        let eps = cfg.rms_norm_eps;
        for (i, layer) in self.layers.iter().enumerate() {
            let path = format!("model.layers.{i}");
            let normed = ops::rms_norm(&h, &layer.input_layernorm, eps)?;
            let normed = taps.tap(&format!("{path}.input_layernorm"), &normed)?;
            let attn = layer.self_attn.forward(
                &normed,
                (&cos, &sin, &mask),
                &format!("{path}.self_attn"),
                taps,
            )?;
            let h1 = (&h + attn)?;
            let normed = ops::rms_norm(&h1, &layer.post_attention_layernorm, eps)?;
            let normed = taps.tap(&format!("{path}.post_attention_layernorm"), &normed)?;
            let mlp = layer.mlp.forward(&normed, &format!("{path}.mlp"), taps)?;
            h = taps.tap(&path, &(h1 + mlp)?)?;
        }
        let h = taps.tap("model.norm", &ops::rms_norm(&h, &self.norm, eps)?)?;
        let h = taps.tap("model", &h)?;
        Ok(taps.tap("lm_head", &self.lm_head.forward(&h)?)?)
    }
}
