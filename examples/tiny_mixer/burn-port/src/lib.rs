//! The burn port of `examples/tiny_mixer/model.py` (a tiny MLP-Mixer classifier;
//! docs/own-model.md), built from burn-nn's `Linear` and `LayerNorm`.
//!
//! PyTorch's state_dict keys are `blocks.{i}.norm1.weight`, `blocks.{i}.token_mlp.0.weight`
//! (`nn.Sequential(Linear, activation, Linear)`: layers `0` and `2`), …, `norm.weight`,
//! `head.weight`. This port names the two Linears of an MLP `fc1` and `fc2`, and its layer
//! norms hold burn's `gamma`/`beta`: the runner loads the fixture with burn-store, whose
//! `PyTorchToBurnAdapter` transposes every Linear weight and finds a norm's `weight`/`bias`
//! for `gamma`/`beta`, and whose key remapping ([`TinyMixer::key_remap`]) turns `.0.`/`.2.`
//! into `.fc1.`/`.fc2.`. No weight is copied by hand.
//!
//! Every module output is tapped under its PyTorch module path (`blocks.0.token_mlp.1` is
//! the token MLP's activation), so the localisation can name the module that differs.

use anyhow::{bail, Context, Result};
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{gelu, relu};
use burn::tensor::{Device, Tensor};
use parity_common::burn::{BurnModel, Input, Output, Taps};

/// The hidden activation of the MLPs (the factory's `activation`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `nn.ReLU`: burn's `relu`.
    Relu,
    /// `nn.GELU` (exact, erf): burn's `gelu`.
    Gelu,
}

/// `Linear → activation → Linear` (PyTorch's `nn.Sequential` of the MLP).
#[derive(Module, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    /// `n → hidden → n`; `last_bias`: whether `fc2` has a bias.
    fn new(n: usize, hidden: usize, last_bias: bool, device: &Device) -> Self {
        Self {
            fc1: LinearConfig::new(n, hidden).init(device),
            fc2: LinearConfig::new(hidden, n)
                .with_bias(last_bias)
                .init(device),
        }
    }

    /// `x` `[B, R, n]` → `[B, R, n]`, tapping `{path}.0`, `{path}.1`, `{path}.2` and `{path}`.
    fn forward(&self, x: Tensor<3>, act: Activation, path: &str, taps: &mut Taps) -> Tensor<3> {
        let h = taps.tap(&format!("{path}.0"), self.fc1.forward(x));
        let h = match act {
            Activation::Relu => relu(h),
            Activation::Gelu => gelu(h),
        };
        let h = taps.tap(&format!("{path}.1"), h);
        let y = taps.tap(&format!("{path}.2"), self.fc2.forward(h));
        taps.tap(path, y)
    }
}

/// One Mixer block: token mixing (across patches) then channel mixing, each behind a
/// LayerNorm with a residual connection.
#[derive(Module, Debug)]
pub struct MixerBlock {
    norm1: LayerNorm,
    token_mlp: Mlp,
    norm2: LayerNorm,
    channel_mlp: Mlp,
}

/// The tiny MLP-Mixer classifier: `blocks`, a final LayerNorm, the mean over patches and
/// the Linear head.
#[derive(Module, Debug)]
pub struct TinyMixer {
    blocks: Vec<MixerBlock>,
    norm: LayerNorm,
    head: Linear,
    #[module(skip)]
    activation: Activation,
}

/// One size from the factory's keyword arguments (the config's `kwargs`), or its default.
fn size(config: &serde_json::Value, key: &str, default: usize) -> Result<usize> {
    match config.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .with_context(|| format!("kwargs.{key} is {v}, not a size")),
    }
}

impl BurnModel for TinyMixer {
    /// `config`: the factory's kwargs (`patches`, `dim`, `hidden`, `blocks`, `classes`,
    /// `activation`, `token_bias`; defaults 4, 8, 16, 2, 3, `relu`, true). The initial values
    /// are burn's; the runner replaces every one with the fixture's.
    fn init(config: &serde_json::Value, device: &Device) -> Result<Self> {
        let patches = size(config, "patches", 4)?;
        let dim = size(config, "dim", 8)?;
        let hidden = size(config, "hidden", 16)?;
        let blocks = size(config, "blocks", 2)?;
        let classes = size(config, "classes", 3)?;
        let token_bias = match config.get("token_bias") {
            None => true,
            Some(v) => v
                .as_bool()
                .with_context(|| format!("kwargs.token_bias is {v}, not a boolean"))?,
        };
        let activation = match config.get("activation").and_then(|v| v.as_str()) {
            None | Some("relu") => Activation::Relu,
            Some("gelu") => Activation::Gelu,
            Some(other) => bail!("kwargs.activation is {other:?}; the port has relu and gelu"),
        };
        // PyTorch's nn.LayerNorm: ε = 1e-5 (burn's default too), with a bias.
        let norm = || LayerNormConfig::new(dim).with_epsilon(1e-5).init(device);
        Ok(Self {
            blocks: (0..blocks)
                .map(|_| MixerBlock {
                    norm1: norm(),
                    token_mlp: Mlp::new(patches, hidden, token_bias, device),
                    norm2: norm(),
                    channel_mlp: Mlp::new(dim, hidden, true, device),
                })
                .collect(),
            norm: norm(),
            head: LinearConfig::new(dim, classes).init(device),
            activation,
        })
    }

    /// `x`: `[B, patches, dim]` floats → logits `[B, classes]`.
    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Float3(mut x) = x else {
            bail!("the tiny mixer takes float inputs [B, patches, dim]");
        };
        for (i, b) in self.blocks.iter().enumerate() {
            let p = format!("blocks.{i}");
            let h = taps.tap(&format!("{p}.norm1"), b.norm1.forward(x.clone()));
            let y = b
                .token_mlp
                .forward(
                    h.swap_dims(1, 2),
                    self.activation,
                    &format!("{p}.token_mlp"),
                    taps,
                )
                .swap_dims(1, 2);
            x = x + y;
            let h = taps.tap(&format!("{p}.norm2"), b.norm2.forward(x.clone()));
            let y = b
                .channel_mlp
                .forward(h, self.activation, &format!("{p}.channel_mlp"), taps);
            x = taps.tap(&p, x + y);
        }
        let h = taps.tap("norm", self.norm.forward(x));
        let pooled: Tensor<2> = h.mean_dim(1).squeeze_dim(1);
        Ok(Output::Rank2(taps.tap("head", self.head.forward(pooled))))
    }

    /// PyTorch's `….token_mlp.0.…`/`….2.…` (and the channel MLP's) to the port's
    /// `fc1`/`fc2`; everything else keeps its name.
    fn key_remap(_config: &serde_json::Value) -> Vec<(String, String)> {
        vec![
            (r"_mlp\.0\.".into(), "_mlp.fc1.".into()),
            (r"_mlp\.2\.".into(), "_mlp.fc2.".into()),
        ]
    }
}
