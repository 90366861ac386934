//! The template's candle port of `model.py`'s `make_model` (docs/own-model.md): replace it
//! with the port of your model.
//!
//! PyTorch: `nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))`,
//! state_dict keys `0.weight` `[hidden, inputs]`, `0.bias` `[hidden]`, `2.weight`
//! `[outputs, hidden]`, `2.bias` `[outputs]`; module paths `0`, `1`, `2`.

use anyhow::{Context, Result};
use candle_core::Tensor;
use candle_nn::{Linear, Module, VarBuilder};
use parity_common::candle::{CandleModel, Taps};

/// Linear → tanh → Linear, as the PyTorch factory builds it.
pub struct Model {
    first: Linear,
    last: Linear,
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

impl CandleModel for Model {
    /// `config`: the factory's kwargs (`inputs`, `hidden`, `outputs`, defaults 4, 8, 2).
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let inputs = size(config, "inputs", 4)?;
        let hidden = size(config, "hidden", 8)?;
        let outputs = size(config, "outputs", 2)?;
        Ok(Model {
            // candle_nn::linear asks for `<prefix>.weight` [out, in] and `<prefix>.bias`,
            // PyTorch's names and layout.
            first: candle_nn::linear(inputs, hidden, vb.pp("0"))?,
            last: candle_nn::linear(hidden, outputs, vb.pp("2"))?,
        })
    }

    /// `x`: `[B, inputs]` → `[B, outputs]`, each module's output tapped under its path.
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let h = taps.tap("0", &self.first.forward(x)?)?;
        let h = taps.tap("1", &h.tanh()?)?;
        Ok(taps.tap("2", &self.last.forward(&h)?)?)
    }
}
