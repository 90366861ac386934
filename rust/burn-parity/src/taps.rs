//! Named intermediates of the forward pass and their gradients, for `replay`
//! ([`parity_common::replay`]).
//!
//! burn's autodiff keeps gradients only for leaves that require them (parameters, and tensors
//! marked with `require_grad`), not for the outputs of operations: burn-tensor 0.22.1's
//! `Tensor::require_grad` panics on a non-leaf, and there is no `retain_grad`. To read d loss / d h for an
//! intermediate `h`, the forward pass adds a *tap* to it: a leaf tensor of `h`'s shape that
//! requires grad, holding negative zeros, `h + tap`. The tap's gradient is then exactly h's:
//! the add's backward hands the incoming gradient to both operands unchanged (same shapes, so
//! no reduction). Negative zero, not positive, because `x + (−0) = x` for every IEEE value
//! including `−0` (whereas `−0 + (+0) = +0`), so the tapped forward computes the same bits as
//! the untapped one. The replay tests check both claims against `train`, bit for bit.
//!
//! With [`Taps::off`] the forward pass adds nothing: `train` runs the very operations it ran
//! before taps existed.

use anyhow::Result;
use burn::tensor::{Device, Gradients, Tensor, TensorData};
use parity_common::spec::FloatType;

use crate::device::{dtype, Host};

/// A tapped intermediate of rank 2 (`fc*.out`, `relu*.out` of the MLP, `fc.out`), rank 3
/// (`conv.out`, `relu.out` of the CNN, `[batch, channels, L_out]`; the transformer's
/// activations, `[batch, seq_len, features]`, its logits `head.out` among them) or rank 4
/// (the transformer's attention scores and weights, `[batch, heads, seq_len, seq_len]`).
#[derive(Clone)]
enum Tapped {
    Two { value: Tensor<2>, tap: Tensor<2> },
    Three { value: Tensor<3>, tap: Tensor<3> },
    Four { value: Tensor<4>, tap: Tensor<4> },
}

/// The intermediates one forward pass records, by the names of
/// [`parity_common::replay::forward_names`] (without `loss`), in forward order.
pub struct Taps {
    on: Option<Device>,
    marked: Vec<(String, Tapped)>,
}

impl Taps {
    /// Records nothing and adds no operation to the forward pass.
    pub fn off() -> Self {
        Taps {
            on: None,
            marked: Vec::new(),
        }
    }

    /// Records every intermediate the forward pass marks, tapping it with negative zeros
    /// created on `device` (the autodiff device the model runs on) in the intermediate's dtype.
    pub fn on(device: &Device) -> Self {
        Taps {
            on: Some(device.clone()),
            marked: Vec::new(),
        }
    }

    /// Marks `h` `[batch, features]` as `name`: returns `h + tap` when on, `h` itself when off.
    pub fn mark2(&mut self, name: &str, h: Tensor<2>) -> Tensor<2> {
        let Some(device) = &self.on else { return h };
        let tap = neg_zeros(h.dims(), h.dtype(), device);
        let out = h.clone() + tap.clone();
        self.marked
            .push((name.into(), Tapped::Two { value: h, tap }));
        out
    }

    /// Marks `h` `[batch, channels, length]` (or the transformer's `[batch, seq_len, vocab]`)
    /// as `name`, as [`Taps::mark2`].
    pub fn mark3(&mut self, name: &str, h: Tensor<3>) -> Tensor<3> {
        let Some(device) = &self.on else { return h };
        let tap = neg_zeros(h.dims(), h.dtype(), device);
        let out = h.clone() + tap.clone();
        self.marked
            .push((name.into(), Tapped::Three { value: h, tap }));
        out
    }

    /// Marks `h` `[batch, heads, seq_len, seq_len]` (the transformer's attention scores and
    /// weights) as `name`, as [`Taps::mark2`].
    pub fn mark4(&mut self, name: &str, h: Tensor<4>) -> Tensor<4> {
        let Some(device) = &self.on else { return h };
        let tap = neg_zeros(h.dims(), h.dtype(), device);
        let out = h.clone() + tap.clone();
        self.marked
            .push((name.into(), Tapped::Four { value: h, tap }));
        out
    }

    /// The marked intermediates' values, flattened row-major (the PyTorch layout: burn's
    /// activations are `[batch, …]` like PyTorch's), in the run dtype `ty`.
    ///
    /// # Errors
    /// When a tensor cannot be read or is not in `ty` (see [`Host::read`]).
    pub fn values(&self, ty: FloatType) -> Result<Vec<(String, Host)>> {
        self.marked
            .iter()
            .map(|(name, t)| {
                let host = match t {
                    Tapped::Two { value, .. } => Host::read(value.clone().inner(), ty)?,
                    Tapped::Three { value, .. } => Host::read(value.clone().inner(), ty)?,
                    Tapped::Four { value, .. } => Host::read(value.clone().inner(), ty)?,
                };
                Ok((name.clone(), host))
            })
            .collect()
    }

    /// d loss / d intermediate for each marked intermediate, read from its tap's gradient in
    /// `grads` (from `loss.backward()`), same layout and dtype as [`Taps::values`]; `None`
    /// where no gradient reached the tap.
    ///
    /// # Errors
    /// As [`Taps::values`].
    pub fn grads(&self, grads: &Gradients, ty: FloatType) -> Result<Vec<(String, Option<Host>)>> {
        self.marked
            .iter()
            .map(|(name, t)| {
                let host = match t {
                    Tapped::Two { tap, .. } => tap.grad(grads).map(|g| Host::read(g, ty)),
                    Tapped::Three { tap, .. } => tap.grad(grads).map(|g| Host::read(g, ty)),
                    Tapped::Four { tap, .. } => tap.grad(grads).map(|g| Host::read(g, ty)),
                };
                Ok((name.clone(), host.transpose()?))
            })
            .collect()
    }
}

/// A leaf of negative zeros of `shape` and `dtype` on `device` that requires grad.
fn neg_zeros<const D: usize>(
    shape: [usize; D],
    dt: burn::tensor::DType,
    device: &Device,
) -> Tensor<D> {
    let n = shape.iter().product();
    let data = if dt == dtype(FloatType::F64) {
        TensorData::new(vec![-0.0f64; n], shape)
    } else {
        TensorData::new(vec![-0.0f32; n], shape)
    };
    Tensor::<D>::from_data(data, (device, dt)).require_grad()
}
