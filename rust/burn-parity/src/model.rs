//! The model of a run ([`Net`], one of the families: [`crate::mlp`], [`crate::cnn`],
//! [`crate::transformer`]) loaded from the fixture, and the one map between PyTorch's
//! state_dict keys and burn's parameters that serves every family (export, gradients,
//! loading a state), so that a key cannot be mapped two ways.
//!
//! Parameters keep PyTorch's state_dict names. burn's `Linear` holds its weight as
//! `[in, out]`, PyTorch's as `[out, in]`: the loader converts (see [`crate::layout`]) and
//! [`Net::export`] converts back, so traces are in PyTorch layout. Conv1d weights are
//! `[out, in, kernel]`, embeddings `[rows, d_model]` and layer-norm weights and biases `[d]`
//! in both. The frames read the parameters and their gradients through parity-common's
//! [`Parameters`], which [`Net`] implements.

use anyhow::{bail, Context, Result};
use burn::module::{Module, Param, ParamId};
use burn::tensor::{Device, Gradients, Tensor};
use parity_common::frames::RawTensor;
use parity_common::optim::Parameters;
use parity_common::spec::{FloatType, Model, RunSpec};

pub use crate::cnn::Cnn;
use crate::data::{float_targets, Inputs, Targets};
pub use crate::data::{loss, Data};
use crate::device::{float_tensor_from_f64, Host};
use crate::fixture::Fixture;
use crate::layers::{torch_layout, Slot, SlotMut};
use crate::layout;
pub use crate::mlp::Mlp;
use crate::taps::Taps;
use crate::transformer::Transformer;

/// A model of one of the families of [`Model`].
// One Net per process, moved through `optim.step` once per step: the variants' sizes do not
// matter, and burn's `Module` derive needs the modules inline.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Net {
    /// Model::Mlp.
    Mlp(Mlp),
    /// Model::Cnn1d.
    Cnn(Cnn),
    /// Model::Transformer.
    Transformer(Transformer),
}

/// One parameter of a [`Net`]: what ties a PyTorch state_dict entry to burn's parameter.
#[derive(Debug, Clone)]
pub struct ParamInfo {
    /// PyTorch state_dict name (`fc1.weight`).
    pub name: String,
    /// burn's id of the parameter, which keys its optimizer state.
    pub id: ParamId,
    /// Shape in burn's layout (`[in, out]` for a Linear weight).
    pub burn_shape: Vec<usize>,
    /// `(in, out)` for a Linear weight (burn `[in, out]`, PyTorch `[out, in]`); `None` for a
    /// tensor laid out alike in both.
    pub linear: Option<(usize, usize)>,
}

impl ParamInfo {
    /// Row-major values in PyTorch layout → burn's layout (a transpose for a Linear weight).
    pub fn to_burn<T: Copy>(&self, torch: &[T]) -> Vec<T> {
        match self.linear {
            Some((inp, out)) => layout::torch_to_burn_linear(torch, out, inp),
            None => torch.to_vec(),
        }
    }

    /// Host values in burn's layout → PyTorch layout, the inverse of [`ParamInfo::to_burn`].
    pub fn to_torch(&self, burn: Host) -> Host {
        match self.linear {
            Some((inp, out)) => torch_layout(burn, inp, out),
            None => burn,
        }
    }
}

impl Net {
    /// Builds the model of `spec` from its fixture in the run dtype (float32 values widened
    /// exactly for F64 runs) on `device`, and the data.
    ///
    /// # Errors
    /// When the fixture lacks a tensor or holds it with another shape or dtype (parameters and `x` float32, `y` float32 for
    /// MSE or int64 for cross-entropy; for the transformer `x` and `y` int64 token ids), the CNN asks for
    /// candle's conv2d workaround, or the transformer for a candle-side setting (see
    /// [`crate::transformer::check_settings`]); for an own model ([`Model::Own`]).
    pub fn load(spec: &RunSpec, device: &Device) -> Result<(Net, Data)> {
        let fx = Fixture::read(spec)?;
        let (net, inputs, targets) = match &spec.model {
            Model::Transformer { .. } => {
                let (net, inputs, targets) = crate::transformer::load(spec, &fx, device)?;
                (Net::Transformer(net), inputs, targets)
            }
            Model::Mlp { .. } | Model::Cnn1d { .. } => Self::load_float(spec, &fx, device)?,
            Model::Own { .. } => {
                bail!("an own model runs in its own runner (docs/own-model.md), not burn-parity")
            }
        };
        let device = device.clone();
        Ok((
            net,
            Data {
                inputs,
                targets,
                device,
            },
        ))
    }

    /// The MLP or CNN of `spec` ([`Mlp::load`], [`Cnn::load`]) with its float32 inputs `x`
    /// `[batches, batch, …input]` and its targets ([`crate::data::float_targets`]).
    fn load_float(spec: &RunSpec, fx: &Fixture, device: &Device) -> Result<(Net, Inputs, Targets)> {
        let ty = spec.dtype;
        let x_shape = fx
            .f32s
            .get("x")
            .map(|(s, _)| s.clone())
            .with_context(|| format!("fixture {} has no float32 tensor \"x\"", fx.path))?;
        let batches = x_shape[0];
        let batch = *x_shape.get(1).unwrap_or(&0);
        let (net, inputs, outputs) = match &spec.model {
            Model::Mlp { sizes, activation } => {
                let (mlp, inputs) =
                    Mlp::load(fx, sizes, *activation, (batches, batch), ty, device)?;
                (Net::Mlp(mlp), inputs, sizes[sizes.len() - 1])
            }
            Model::Cnn1d { classes, .. } => {
                let (cnn, inputs) = Cnn::load(fx, &spec.model, (batches, batch), ty, device)?;
                (Net::Cnn(cnn), inputs, *classes)
            }
            Model::Transformer { .. } | Model::Own { .. } => {
                unreachable!("loaded by transformer::load, or refused by Net::load")
            }
        };
        let targets = float_targets(fx, spec.loss, (batches, batch, outputs), ty, device)?;
        Ok((net, inputs, targets))
    }

    /// Every parameter in state_dict order ([`Model::params`]) with its layout.
    fn slots(&self) -> Vec<(String, Slot<'_>)> {
        match self {
            Net::Mlp(m) => m.slots(),
            Net::Cnn(c) => c.slots(),
            Net::Transformer(t) => t.slots(),
        }
    }

    /// Every parameter in state_dict order, flattened in PyTorch layout, in the run dtype.
    ///
    /// # Errors
    /// When a tensor cannot be read or is not in `ty` (see [`Host::read`]).
    pub fn export(&self, ty: FloatType) -> Result<Vec<(String, Host)>> {
        self.slots()
            .into_iter()
            .map(|(name, slot)| {
                let host = match slot {
                    Slot::LinearWeight(p, inp, out) => {
                        torch_layout(Host::read(p.val().inner(), ty)?, inp, out)
                    }
                    Slot::Vector(p) => Host::read(p.val().inner(), ty)?,
                    Slot::Kernel(p) => Host::read(p.val().inner(), ty)?,
                    Slot::Matrix(p) => Host::read(p.val().inner(), ty)?,
                };
                Ok((name, host))
            })
            .collect()
    }

    /// The gradient of every parameter that has one, as [`Net::export`] lays them out.
    ///
    /// # Errors
    /// As [`Net::export`].
    pub fn export_grads(&self, grads: &Gradients, ty: FloatType) -> Result<Vec<(String, Host)>> {
        let mut out = Vec::new();
        for (name, slot) in self.slots() {
            let host = match slot {
                Slot::LinearWeight(p, inp, out) => match p.val().grad(grads) {
                    Some(g) => torch_layout(Host::read(g, ty)?, inp, out),
                    None => continue,
                },
                Slot::Vector(p) => match p.val().grad(grads) {
                    Some(g) => Host::read(g, ty)?,
                    None => continue,
                },
                Slot::Kernel(p) => match p.val().grad(grads) {
                    Some(g) => Host::read(g, ty)?,
                    None => continue,
                },
                Slot::Matrix(p) => match p.val().grad(grads) {
                    Some(g) => Host::read(g, ty)?,
                    None => continue,
                },
            };
            out.push((name, host));
        }
        Ok(out)
    }

    /// Every parameter in state_dict order: its name, burn's id (which keys the optimizer's
    /// state) and its layout (see [`ParamInfo`]).
    pub fn params(&self) -> Vec<ParamInfo> {
        self.slots()
            .into_iter()
            .map(|(name, slot)| {
                let (id, burn_shape, linear) = match slot {
                    Slot::LinearWeight(p, inp, out) => (p.id, vec![inp, out], Some((inp, out))),
                    Slot::Vector(p) => (p.id, p.val().dims().to_vec(), None),
                    Slot::Kernel(p) => (p.id, p.val().dims().to_vec(), None),
                    Slot::Matrix(p) => (p.id, p.val().dims().to_vec(), None),
                };
                ParamInfo {
                    name,
                    id,
                    burn_shape,
                    linear,
                }
            })
            .collect()
    }

    /// Replaces every parameter by the value given for its state_dict name (PyTorch layout,
    /// row-major, as f64), rounded once to the run dtype `ty` (exact for float32 values), as a
    /// fresh trainable parameter on `device`.
    ///
    /// # Errors
    /// When the names are not exactly the net's, in state_dict order, or a value count is not
    /// the parameter's.
    pub fn set_params(
        &mut self,
        values: &[(String, &[f64])],
        ty: FloatType,
        device: &Device,
    ) -> Result<()> {
        let infos = self.params();
        let names: Vec<&str> = infos.iter().map(|p| p.name.as_str()).collect();
        let given: Vec<&str> = values.iter().map(|(n, _)| n.as_str()).collect();
        if names != given {
            bail!("the state's parameters are {given:?}, the model's {names:?}");
        }
        for (info, (_, v)) in infos.iter().zip(values) {
            if v.len() != info.burn_shape.iter().product::<usize>() {
                bail!(
                    "{}: {} values for shape {:?}",
                    info.name,
                    v.len(),
                    info.burn_shape
                );
            }
            let v = info.to_burn(v);
            match self.slot_mut(&info.name) {
                SlotMut::Two(p) => {
                    let s = [info.burn_shape[0], info.burn_shape[1]];
                    *p = Param::from_tensor(float_tensor_from_f64(&v, s, ty, device));
                }
                SlotMut::One(p) => {
                    let s = [info.burn_shape[0]];
                    *p = Param::from_tensor(float_tensor_from_f64(&v, s, ty, device));
                }
                SlotMut::Three(p) => {
                    let s = [info.burn_shape[0], info.burn_shape[1], info.burn_shape[2]];
                    *p = Param::from_tensor(float_tensor_from_f64(&v, s, ty, device));
                }
            }
        }
        Ok(())
    }

    /// The parameter named `name` (a name of [`Net::params`]), mutably.
    fn slot_mut(&mut self, name: &str) -> SlotMut<'_> {
        let (module, field) = name.rsplit_once('.').expect("a state_dict name has a dot");
        match self {
            Net::Mlp(m) => m.slot_mut(module, field),
            Net::Cnn(c) => c.slot_mut(module, field),
            Net::Transformer(t) => t.slot_mut(module, field),
        }
    }

    /// The forward pass on the batch of step `t` (from 1): output `[batch, outputs]`; for the
    /// transformer the logits `[batch·seq_len, vocab]` (every position a row, as the loss
    /// takes them; [`Transformer::forward`] gives `[batch, seq_len, vocab]`).
    pub fn forward_step(&self, data: &Data, t: u32) -> Tensor<2> {
        self.forward_tapped(data, t, &mut Taps::off())
    }

    /// [`Net::forward_step`], marking every intermediate of
    /// [`parity_common::replay::forward_names`] (but `loss`) in `taps` (see [`crate::taps`]);
    /// with [`Taps::off`] it is exactly [`Net::forward_step`].
    pub fn forward_tapped(&self, data: &Data, t: u32, taps: &mut Taps) -> Tensor<2> {
        let i = data.index(t);
        match (self, &data.inputs) {
            (Net::Mlp(m), Inputs::Flat(x)) => m.forward_tapped(x[i].clone(), taps),
            (Net::Cnn(c), Inputs::Signal(x)) => c.forward_tapped(x[i].clone(), taps),
            (Net::Transformer(m), Inputs::Tokens(x)) => {
                let logits = m.forward_tapped(x[i].clone(), taps);
                let [b, t, v] = logits.dims();
                logits.reshape([b * t, v])
            }
            _ => unreachable!("Net::load pairs each family with its inputs"),
        }
    }
}

/// The frames' copies of a burn net: [`Net::export`] and [`Net::export_grads`] (PyTorch
/// layout, checked to be in the run dtype `ty`), the kept parameters in the frame's host form.
impl Parameters for Net {
    type Grads = Gradients;

    /// # Errors
    /// As [`Net::export`] (for any parameter, kept or not).
    fn frame_params(
        &self,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        Ok(kept(self.export(ty)?, keep))
    }

    /// # Errors
    /// As [`Net::export_grads`] (for any parameter, kept or not).
    fn frame_grads(
        &self,
        grads: &Gradients,
        ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        Ok(kept(self.export_grads(grads, ty)?, keep))
    }
}

/// The host values `keep` selects, as frame tensors.
fn kept(host: Vec<(String, Host)>, keep: &dyn Fn(&str) -> bool) -> Vec<(String, RawTensor)> {
    host.into_iter()
        .filter(|(name, _)| keep(name))
        .map(|(name, h)| (name, h.into_raw()))
        .collect()
}
