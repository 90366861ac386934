//! The `cnn1d` family ([`CnnConfig`]) as a burn port: burn's `Conv1d` (weight
//! `[out, in, kernel]`, PyTorch's layout too) → ReLU → flatten → a burn `Linear`.

use anyhow::{bail, Result};
use burn::module::Module;
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig1d};
use burn::tensor::activation::relu;
use burn::tensor::Device;
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::families::{self, Activation, CnnConfig, ConvImpl};

/// `conv` → ReLU → flatten → `fc`.
#[derive(Module, Debug)]
pub struct Cnn {
    /// Conv1d `in_channels → channels`, kernel `kernel`, stride 1, no padding, with bias.
    pub conv: Conv1d,
    /// Linear `channels·(length − kernel + 1) → classes`.
    pub fc: Linear,
}

impl BurnModel for Cnn {
    const TAPS_ITS_OUTPUT: bool = true;

    /// The convolution and the Linear of the config.
    ///
    /// # Errors
    /// A config that is not a CNN's, or candle's conv2d workaround (`conv_impl` other than
    /// `conv1d`).
    fn init(config: &serde_json::Value, device: &Device) -> Result<Self> {
        let c: CnnConfig = families::parse("cnn1d", config)?;
        let Activation::Relu = c.activation;
        if c.conv_impl != ConvImpl::Conv1d {
            bail!(
                "burn-parity calls burn's conv1d; conv_impl {:?} is candle's workaround",
                c.conv_impl
            );
        }
        Ok(Cnn {
            conv: Conv1dConfig::new(c.in_channels, c.channels, c.kernel)
                .with_stride(1)
                .with_dilation(1)
                .with_groups(1)
                .with_padding(PaddingConfig1d::Valid)
                .with_bias(true)
                .init(device),
            fc: LinearConfig::new(c.channels * c.out_len(), c.classes)
                .with_bias(true)
                .init(device),
        })
    }

    /// `x` `[batch, in_channels, length]` → conv1d `[batch, channels, length − kernel + 1]`
    /// → ReLU → flatten (channel-major, like PyTorch's `flatten(1)`) → `fc` →
    /// `[batch, classes]`, tapping `conv` (bias included, before the ReLU), `relu` (before
    /// the flatten) and `fc`.
    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Float3(x) = x else {
            bail!("the CNN takes float inputs [batch, channels, length]");
        };
        let h = taps.tap("conv", self.conv.forward(x));
        let h = taps.tap("relu", relu(h));
        let [b, c, l] = h.dims();
        Ok(Output::Rank2(
            taps.tap("fc", self.fc.forward(h.reshape([b, c * l]))),
        ))
    }
}
