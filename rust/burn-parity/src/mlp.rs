//! The MLP family ([`Model::Mlp`]) as burn-nn modules: `fc1 … fcN`, burn `Linear`s (weights
//! in burn's `[in, out]` layout, see `layers.rs`) with ReLU between them.

use anyhow::Result;
use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
#[cfg(doc)]
use parity_common::spec::Model;
use parity_common::spec::{Activation, FloatType};

use crate::data::{per_batch, Inputs};
use crate::device::float_tensor;
use crate::fixture::Fixture;
use crate::layers::{linear, linear_slot_mut, linear_slots, Slot, SlotMut};
use crate::taps::Taps;

/// `fc1 … fcN` with ReLU between them (none after the last).
#[derive(Module, Debug)]
pub struct Mlp {
    /// `fc{i+1}` at index `i`.
    pub layers: Vec<Linear>,
}

impl Mlp {
    /// The MLP of `sizes` (layer widths, input first) from the fixture: `fc{i}.weight`
    /// `[out, in]` float32, converted to burn's `[in, out]`, and `fc{i}.bias` `[out]`; and its
    /// inputs `x` `[batches, batch, sizes[0]]` float32, one `[batch, sizes[0]]` tensor per
    /// batch; both in the run dtype `ty` on `device`.
    ///
    /// # Errors
    /// When the fixture lacks a tensor or holds it with another shape or dtype.
    pub(crate) fn load(
        fx: &Fixture,
        sizes: &[usize],
        activation: Activation,
        (batches, batch): (usize, usize),
        ty: FloatType,
        device: &Device,
    ) -> Result<(Mlp, Inputs)> {
        let Activation::Relu = activation;
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| linear(fx, &format!("fc{}", i + 1), w[0], w[1], ty, device))
            .collect::<Result<Vec<_>>>()?;
        let x = fx.f32("x", &[batches, batch, sizes[0]])?;
        let inputs = per_batch(x, batches)
            .map(|b| float_tensor(b, [batch, sizes[0]], ty, device))
            .collect();
        Ok((Mlp { layers }, Inputs::Flat(inputs)))
    }

    /// `x` `[batch, sizes[0]]` → `[batch, sizes[N]]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        self.forward_tapped(x, &mut Taps::off())
    }

    /// [`Mlp::forward`], marking `fc{i}.out` (each Linear's output) and `relu{i}.out` (each
    /// activation's output) in `taps`.
    pub fn forward_tapped(&self, x: Tensor<2>, taps: &mut Taps) -> Tensor<2> {
        let last = self.layers.len() - 1;
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            h = taps.mark2(&format!("fc{}.out", i + 1), layer.forward(h));
            if i < last {
                h = taps.mark2(&format!("relu{}.out", i + 1), relu(h));
            }
        }
        h
    }

    /// Every parameter in state_dict order: `fc{i}.weight`, `fc{i}.bias`, layer by layer.
    pub(crate) fn slots(&self) -> Vec<(String, Slot<'_>)> {
        self.layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| linear_slots(format!("fc{}", i + 1), l))
            .collect()
    }

    /// The parameter `module.field` (`fc{i}` and `weight` or `bias`), mutably.
    ///
    /// # Panics
    /// For a module name that is not `fc{i}` of one of the layers.
    pub(crate) fn slot_mut(&mut self, module: &str, field: &str) -> SlotMut<'_> {
        let i: usize = module[2..].parse().expect("fc{i}");
        linear_slot_mut(&mut self.layers[i - 1], field)
    }
}
