//! The `cnn1d` family ([`CnnConfig`]) as a candle port: `conv` → activation → flatten → `fc`,
//! the convolution through `conv2d` (the study's workaround) or `conv1d` (candle 0.11.0's
//! kernel gradient is wrong when batch > 1 and output channels > 1).

use anyhow::Result;
use candle_core::Tensor;
use candle_nn::VarBuilder;
use parity_common::candle::{CandleModel, Taps};
use parity_common::families::{self, Activation, CnnConfig, ConvImpl};

/// The 1-D CNN: `conv.weight` `[out, in, k]`, `conv.bias` `[out]`, `fc.weight`
/// `[classes, out·(length − k + 1)]`, `fc.bias` `[classes]`.
pub struct Cnn {
    config: CnnConfig,
    conv_w: Tensor,
    conv_b: Tensor,
    fc_w: Tensor,
    fc_b: Tensor,
}

impl CandleModel for Cnn {
    const TAPS_ITS_OUTPUT: bool = true;

    /// The four parameters from `vb` (PyTorch layout, candle's too).
    ///
    /// # Errors
    /// A config that is not a CNN's, or the store's refusals.
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let c: CnnConfig = families::parse("cnn1d", config)?;
        let (conv, fc) = (vb.pp("conv"), vb.pp("fc"));
        Ok(Self {
            conv_w: conv.get((c.channels, c.in_channels, c.kernel), "weight")?,
            conv_b: conv.get(c.channels, "bias")?,
            fc_w: fc.get((c.classes, c.channels * c.out_len()), "weight")?,
            fc_b: fc.get(c.classes, "bias")?,
            config: c,
        })
    }

    /// `x` `[batch, in_channels, length]` → `[batch, classes]`, tapping `conv`
    /// (`[batch, channels, length − kernel + 1]`, bias included), the activation (`relu`,
    /// before flattening) and `fc`.
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let w = &self.conv_w;
        let conv = match self.config.conv_impl {
            // [b, c, l] → [b, c, 1, l] with kernel [o, c, 1, k], then back.
            ConvImpl::Conv2d => x
                .unsqueeze(2)?
                .conv2d(&w.unsqueeze(2)?, 0, 1, 1, 1)?
                .squeeze(2)?,
            ConvImpl::Conv1d => x.conv1d(w, 0, 1, 1, 1)?,
        };
        let h = conv.broadcast_add(&self.conv_b.reshape((1, self.config.channels, 1))?)?;
        let h = taps.tap("conv", &h)?;
        let h = match self.config.activation {
            Activation::Relu => h.relu()?,
        };
        let h = taps.tap(self.config.activation.name(), &h)?;
        let h = h.flatten_from(1)?;
        let out = h.matmul(&self.fc_w.t()?)?.broadcast_add(&self.fc_b)?;
        Ok(taps.tap("fc", &out)?)
    }
}
