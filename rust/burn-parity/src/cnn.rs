//! The 1-D CNN family ([`Model::Cnn1d`]) as burn-nn modules: burn's `Conv1d` (weight
//! `[out, in, kernel]`, PyTorch's layout too) → ReLU → flatten → a burn `Linear` (see
//! `layers.rs`).

use anyhow::{bail, Result};
use burn::module::{Module, Param};
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, PaddingConfig1d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use parity_common::spec::{Activation, ConvImpl, FloatType, Model};

use crate::data::{per_batch, Inputs};
use crate::device::float_tensor;
use crate::fixture::Fixture;
use crate::layers::{linear, linear_slot_mut, linear_slots, Slot, SlotMut};
use crate::taps::Taps;

/// `conv` → ReLU → flatten → `fc`.
#[derive(Module, Debug)]
pub struct Cnn {
    /// Conv1d `in_channels → channels`, kernel `kernel`, stride 1, no padding, with bias.
    pub conv: Conv1d,
    /// Linear `channels·(length − kernel + 1) → classes`.
    pub fc: Linear,
}

impl Cnn {
    /// The CNN of `model` (a [`Model::Cnn1d`]) from the fixture (`conv.weight`
    /// `[channels, in_channels, kernel]`, `conv.bias`, and the Linear `fc`, float32) and its
    /// inputs `x` `[batches, batch, in_channels, length]`, one tensor per batch, in the run
    /// dtype `ty` on `device`.
    ///
    /// # Errors
    /// For candle's conv2d workaround (`conv_impl` other than `conv1d`), or when the fixture
    /// lacks a tensor or holds it with another shape or dtype.
    pub(crate) fn load(
        fx: &Fixture,
        model: &Model,
        (batches, batch): (usize, usize),
        ty: FloatType,
        device: &Device,
    ) -> Result<(Cnn, Inputs)> {
        let Model::Cnn1d {
            in_channels,
            channels,
            kernel,
            length,
            classes,
            activation,
            conv_impl,
        } = model
        else {
            unreachable!("Cnn::load of a {model:?}")
        };
        let Activation::Relu = activation;
        if *conv_impl != ConvImpl::Conv1d {
            bail!(
                "burn-parity calls burn's conv1d; conv_impl {conv_impl:?} is candle's workaround"
            );
        }
        let mut conv = Conv1dConfig::new(*in_channels, *channels, *kernel)
            .with_stride(1)
            .with_dilation(1)
            .with_groups(1)
            .with_padding(PaddingConfig1d::Valid)
            .with_bias(true)
            .init(device);
        let shape = [*channels, *in_channels, *kernel];
        conv.weight = Param::from_tensor(float_tensor(
            fx.f32("conv.weight", &shape)?,
            shape,
            ty,
            device,
        ));
        conv.bias = Some(Param::from_tensor(float_tensor(
            fx.f32("conv.bias", &[*channels])?,
            [*channels],
            ty,
            device,
        )));
        let fc_in = channels * (length + 1 - kernel);
        let fc = linear(fx, "fc", fc_in, *classes, ty, device)?;
        let x = fx.f32("x", &[batches, batch, *in_channels, *length])?;
        let inputs = per_batch(x, batches)
            .map(|b| float_tensor(b, [batch, *in_channels, *length], ty, device))
            .collect();
        Ok((Cnn { conv, fc }, Inputs::Signal(inputs)))
    }

    /// `x` `[batch, in_channels, length]` → conv1d `[batch, channels, length − kernel + 1]`
    /// → ReLU → flatten (channel-major, like PyTorch's `flatten(1)`) → `fc` → `[batch, classes]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        self.forward_tapped(x, &mut Taps::off())
    }

    /// [`Cnn::forward`], marking `conv.out` (bias included, before the ReLU), `relu.out`
    /// (before the flatten) and `fc.out` in `taps`.
    pub fn forward_tapped(&self, x: Tensor<3>, taps: &mut Taps) -> Tensor<2> {
        let h = taps.mark3("conv.out", self.conv.forward(x));
        let h = taps.mark3("relu.out", relu(h));
        let [b, c, l] = h.dims();
        taps.mark2("fc.out", self.fc.forward(h.reshape([b, c * l])))
    }

    /// Every parameter in state_dict order: `conv.weight`, `conv.bias`, `fc.weight`,
    /// `fc.bias`.
    pub(crate) fn slots(&self) -> Vec<(String, Slot<'_>)> {
        let mut v = vec![("conv.weight".to_string(), Slot::Kernel(&self.conv.weight))];
        if let Some(b) = &self.conv.bias {
            v.push(("conv.bias".to_string(), Slot::Vector(b)));
        }
        v.extend(linear_slots("fc".into(), &self.fc));
        v
    }

    /// The parameter `module.field` (a name of [`Cnn::slots`]), mutably.
    pub(crate) fn slot_mut(&mut self, module: &str, field: &str) -> SlotMut<'_> {
        match (module, field) {
            ("conv", "weight") => SlotMut::Three(&mut self.conv.weight),
            ("conv", _) => SlotMut::One(self.conv.bias.as_mut().expect("Conv1d with bias")),
            _ => linear_slot_mut(&mut self.fc, field),
        }
    }
}
