//! The model families as burn modules (`nn::Linear`, `nn::conv::Conv1d`; the transformer's
//! in [`crate::transformer`]), loaded from the fixture, and the losses.
//!
//! Parameters keep PyTorch's state_dict names. burn's `Linear` holds its weight as
//! `[in, out]`, PyTorch's as `[out, in]`: the loader converts (see [`crate::layout`]) and
//! [`Net::export`] converts back, so traces are in PyTorch layout. Conv1d weights are
//! `[out, in, kernel]`, embeddings `[rows, d_model]` and layer-norm weights and biases `[d]`
//! in both.
//!
//! Just over 500 lines: the one map between state_dict keys and burn's parameters (export,
//! gradients, loading a state) serves every family, the transformer's included, and is
//! kept in one file so that a key cannot be mapped two ways.

use anyhow::{bail, Context, Result};
use burn::module::{Module, Param, ParamId};
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::{Linear, PaddingConfig1d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};
use parity_common::spec::{Activation, ConvImpl, FloatType, Loss, Model, RunSpec};

pub use crate::data::{loss, Data};
use crate::data::{per_batch, Inputs, Targets};
use crate::device::{float_tensor, float_tensor_from_f64, Host};
use crate::fixture::Fixture;
use crate::layout;
use crate::taps::Taps;
use crate::transformer::Transformer;

/// `fc1 … fcN` with ReLU between them (none after the last).
#[derive(Module, Debug)]
pub struct Mlp {
    /// `fc{i+1}` at index `i`.
    pub layers: Vec<Linear>,
}

/// `conv` → ReLU → flatten → `fc`.
#[derive(Module, Debug)]
pub struct Cnn {
    /// Conv1d `in_channels → channels`, kernel `kernel`, stride 1, no padding, with bias.
    pub conv: Conv1d,
    /// Linear `channels·(length − kernel + 1) → classes`.
    pub fc: Linear,
}

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

/// One parameter of a [`Net`], with how its PyTorch layout maps onto burn's.
pub(crate) enum Slot<'a> {
    /// A Linear weight: burn `[in, out]`, PyTorch `[out, in]`.
    LinearWeight(&'a Param<Tensor<2>>, usize, usize),
    /// A bias `[n]`, same layout.
    Vector(&'a Param<Tensor<1>>),
    /// A Conv1d weight `[out, in, kernel]`, same layout.
    Kernel(&'a Param<Tensor<3>>),
    /// A matrix laid out alike in both (an embedding `[rows, d_model]`).
    Matrix(&'a Param<Tensor<2>>),
}

/// One parameter of a [`Net`], mutably, by rank.
pub(crate) enum SlotMut<'a> {
    One(&'a mut Param<Tensor<1>>),
    Two(&'a mut Param<Tensor<2>>),
    Three(&'a mut Param<Tensor<3>>),
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

/// A Linear `inp → out` with bias named `name` in the fixture (PyTorch layout), in burn's.
pub(crate) fn linear(
    fx: &Fixture,
    name: &str,
    inp: usize,
    out: usize,
    ty: FloatType,
    device: &Device,
) -> Result<Linear> {
    let b = fx.f32(&format!("{name}.bias"), &[out])?;
    let mut l = linear_without_bias(fx, name, inp, out, ty, device)?;
    l.bias = Some(Param::from_tensor(float_tensor(b, [out], ty, device)));
    Ok(l)
}

/// A Linear `inp → out` without bias from the fixture's `{name}.weight` (PyTorch layout
/// `[out, in]`, converted to burn's `[in, out]`), in dtype `ty` on `device` (the
/// transformer's key projection, see `parity_common::spec::Model::Transformer`).
///
/// # Errors
/// When the fixture lacks the weight or holds it with another shape.
pub(crate) fn linear_without_bias(
    fx: &Fixture,
    name: &str,
    inp: usize,
    out: usize,
    ty: FloatType,
    device: &Device,
) -> Result<Linear> {
    let w = fx.f32(&format!("{name}.weight"), &[out, inp])?;
    let w = layout::torch_to_burn_linear(w, out, inp);
    Ok(Linear {
        weight: Param::from_tensor(float_tensor(&w, [inp, out], ty, device)),
        bias: None,
    })
}

impl Net {
    /// Builds the model of `spec` from its fixture in the run dtype (float32 values widened
    /// exactly for F64 runs) on `device`, and the data.
    ///
    /// # Errors
    /// When the fixture lacks a tensor or holds it with another shape or dtype (parameters and `x` float32, `y` float32 for
    /// MSE or int64 for cross-entropy; for the transformer `x` and `y` int64 token ids), the CNN asks for
    /// candle's conv2d workaround, or the transformer for a candle-side setting (see
    /// [`crate::transformer::check_settings`]).
    pub fn load(spec: &RunSpec, device: &Device) -> Result<(Net, Data)> {
        let fx = Fixture::read(spec)?;
        if let Model::Transformer { .. } = spec.model {
            let (net, inputs, targets) = crate::transformer::load(spec, &fx, device)?;
            let device = device.clone();
            let data = Data {
                inputs,
                targets,
                device,
            };
            return Ok((Net::Transformer(net), data));
        }
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
                let Activation::Relu = activation;
                let layers = sizes
                    .windows(2)
                    .enumerate()
                    .map(|(i, w)| linear(&fx, &format!("fc{}", i + 1), w[0], w[1], ty, device))
                    .collect::<Result<Vec<_>>>()?;
                let x = fx.f32("x", &[batches, batch, sizes[0]])?;
                let inputs = per_batch(x, batches)
                    .map(|b| float_tensor(b, [batch, sizes[0]], ty, device))
                    .collect();
                (
                    Net::Mlp(Mlp { layers }),
                    Inputs::Flat(inputs),
                    sizes[sizes.len() - 1],
                )
            }
            Model::Cnn1d {
                in_channels,
                channels,
                kernel,
                length,
                classes,
                activation,
                conv_impl,
            } => {
                let Activation::Relu = activation;
                if *conv_impl != ConvImpl::Conv1d {
                    bail!("burn-parity calls burn's conv1d; conv_impl {conv_impl:?} is candle's workaround");
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
                let fc = linear(&fx, "fc", fc_in, *classes, ty, device)?;
                let x = fx.f32("x", &[batches, batch, *in_channels, *length])?;
                let inputs = per_batch(x, batches)
                    .map(|b| float_tensor(b, [batch, *in_channels, *length], ty, device))
                    .collect();
                (Net::Cnn(Cnn { conv, fc }), Inputs::Signal(inputs), *classes)
            }
            Model::Transformer { .. } => unreachable!("loaded above"),
        };
        let targets = match spec.loss {
            Loss::Mse => {
                let y = fx.f32("y", &[batches, batch, outputs])?;
                Targets::Values(
                    per_batch(y, batches)
                        .map(|b| float_tensor(b, [batch, outputs], ty, device))
                        .collect(),
                )
            }
            Loss::CrossEntropy => {
                let (shape, y) = fx.i64s.get("y").with_context(|| {
                    format!(
                        "fixture {}: cross-entropy needs int64 labels \"y\"",
                        fx.path
                    )
                })?;
                if shape != &[batches, batch] {
                    bail!(
                        "fixture {}: y is I64 {shape:?}, expected [{batches}, {batch}]",
                        fx.path
                    );
                }
                Targets::Classes(
                    per_batch(y, batches)
                        .map(|b| {
                            Tensor::<1, Int>::from_data(
                                TensorData::new(b.to_vec(), [batch]),
                                device,
                            )
                        })
                        .collect(),
                )
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

    fn slots(&self) -> Vec<(String, Slot<'_>)> {
        let lin = linear_slots;
        match self {
            Net::Mlp(m) => m
                .layers
                .iter()
                .enumerate()
                .flat_map(|(i, l)| lin(format!("fc{}", i + 1), l))
                .collect(),
            Net::Cnn(c) => {
                let mut v = vec![("conv.weight".to_string(), Slot::Kernel(&c.conv.weight))];
                if let Some(b) = &c.conv.bias {
                    v.push(("conv.bias".to_string(), Slot::Vector(b)));
                }
                v.extend(lin("fc".into(), &c.fc));
                v
            }
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
        let linear = linear_slot_mut;
        match self {
            Net::Mlp(m) => {
                let i: usize = module[2..].parse().expect("fc{i}");
                linear(&mut m.layers[i - 1], field)
            }
            Net::Cnn(c) => match (module, field) {
                ("conv", "weight") => SlotMut::Three(&mut c.conv.weight),
                ("conv", _) => SlotMut::One(c.conv.bias.as_mut().expect("Conv1d with bias")),
                _ => linear(&mut c.fc, field),
            },
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

/// The slots of a Linear named `name`: `{name}.weight` and, if it has one, `{name}.bias`.
pub(crate) fn linear_slots(name: String, l: &Linear) -> Vec<(String, Slot<'_>)> {
    let [inp, out] = l.weight.val().dims();
    let mut v = vec![(
        format!("{name}.weight"),
        Slot::LinearWeight(&l.weight, inp, out),
    )];
    if let Some(b) = &l.bias {
        v.push((format!("{name}.bias"), Slot::Vector(b)));
    }
    v
}

/// The parameter `field` (`weight` or `bias`) of a Linear, mutably.
pub(crate) fn linear_slot_mut<'a>(l: &'a mut Linear, field: &str) -> SlotMut<'a> {
    match field {
        "weight" => SlotMut::Two(&mut l.weight),
        _ => SlotMut::One(l.bias.as_mut().expect("Linear with bias")),
    }
}

/// burn `[in, out]` host values → PyTorch `[out, in]`.
fn torch_layout(h: Host, inp: usize, out: usize) -> Host {
    h.rearrange(
        |v| layout::burn_to_torch_linear(v, inp, out),
        |v| layout::burn_to_torch_linear(v, inp, out),
    )
}

impl Mlp {
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
}

impl Cnn {
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
}
