//! The `mlp` family ([`MlpConfig`]) as a burn port: `fc1 … fcN`, burn-nn `Linear`s (weights
//! in burn's `[in, out]` layout; burn-store's adapter transposes PyTorch's) with ReLU between
//! them.

use anyhow::{bail, Result};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::Device;
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::families::{self, Activation, MlpConfig, ModelFault};

/// `fc1 … fcN` with ReLU between them (none after the last).
#[derive(Module, Debug)]
pub struct Mlp {
    /// `fc{i+1}` at index `i` (burn names them `layers.{i}`: [`BurnModel::key_remap`]).
    pub layers: Vec<Linear>,
}

impl BurnModel for Mlp {
    const TAPS_ITS_OUTPUT: bool = true;

    /// A Linear `sizes[i−1] → sizes[i]` with bias per layer.
    ///
    /// # Errors
    /// A config that is not an MLP's, or a fault in the forward pass (burn-parity implements
    /// none).
    fn init(config: &serde_json::Value, device: &Device) -> Result<Self> {
        let c: MlpConfig = families::parse("mlp", config)?;
        let Activation::Relu = c.activation;
        if c.fault != ModelFault::None {
            bail!("burn-parity implements no faults, got {:?}", c.fault);
        }
        let layers = c
            .sizes
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).with_bias(true).init(device))
            .collect();
        Ok(Mlp { layers })
    }

    /// `x` `[batch, sizes[0]]` → `[batch, sizes[N]]`, tapping `fc{i}` (each Linear's output)
    /// and `relu{i}` (each activation's output).
    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Float2(mut h) = x else {
            bail!("the MLP takes float inputs [batch, features]");
        };
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            h = taps.tap(&format!("fc{}", i + 1), layer.forward(h));
            if i < last {
                h = taps.tap(&format!("relu{}", i + 1), relu(h));
            }
        }
        Ok(Output::Rank2(h))
    }

    /// `^fc{i}\.` → `layers.{i−1}.` for each layer: PyTorch counts the layers from 1, burn's
    /// `Vec` from 0.
    fn key_remap(config: &serde_json::Value) -> Vec<(String, String)> {
        let layers = families::parse::<MlpConfig>("mlp", config).map_or(0, |c| c.sizes.len() - 1);
        (1..=layers)
            .map(|i| (format!(r"^fc{i}\."), format!("layers.{}.", i - 1)))
            .collect()
    }
}
