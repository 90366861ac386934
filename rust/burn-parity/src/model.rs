//! The model families as burn modules (`nn::Linear`, `nn::conv::Conv1d`), loaded from the
//! fixture, and the losses.
//!
//! Parameters keep PyTorch's state_dict names. burn's `Linear` holds its weight as
//! `[in, out]`, PyTorch's as `[out, in]`: the loader converts (see [`crate::layout`]) and
//! [`Net::export`] converts back, so traces are in PyTorch layout. Conv1d weights are
//! `[out, in, kernel]` in both.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use burn::module::{Module, Param};
use burn::nn::conv::{Conv1d, Conv1dConfig};
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::nn::{Linear, PaddingConfig1d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};
use parity_common::spec::{Activation, ConvImpl, FloatType, Loss, Model, RunSpec};

use crate::device::{float_tensor, Host};
use crate::layout;

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
}

/// One parameter of a [`Net`], with how its PyTorch layout maps onto burn's.
enum Slot<'a> {
    /// A Linear weight: burn `[in, out]`, PyTorch `[out, in]`.
    LinearWeight(&'a Param<Tensor<2>>, usize, usize),
    /// A bias `[n]`, same layout.
    Vector(&'a Param<Tensor<1>>),
    /// A Conv1d weight `[out, in, kernel]`, same layout.
    Kernel(&'a Param<Tensor<3>>),
}

/// The fixture's tensors as host values: float32 ones and int64 ones (class labels).
struct Fixture {
    path: String,
    f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    i64s: HashMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Fixture {
    fn read(spec: &RunSpec) -> Result<Fixture> {
        let path = spec.fixture.display().to_string();
        let bytes =
            std::fs::read(&spec.fixture).with_context(|| format!("reading fixture {path}"))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .with_context(|| format!("parsing fixture {path} as safetensors"))?;
        let mut f32s = HashMap::new();
        let mut i64s = HashMap::new();
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            match view.dtype() {
                safetensors::Dtype::F32 => {
                    let v = view
                        .data()
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                        .collect();
                    f32s.insert(name, (shape, v));
                }
                safetensors::Dtype::I64 => {
                    let v = view
                        .data()
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect();
                    i64s.insert(name, (shape, v));
                }
                other => bail!("fixture {path}: {name} has dtype {other:?}, expected F32 or I64"),
            }
        }
        Ok(Fixture { path, f32s, i64s })
    }

    /// A float32 tensor of exactly `shape`.
    fn f32(&self, name: &str, shape: &[usize]) -> Result<&[f32]> {
        match self.f32s.get(name) {
            Some((s, v)) if s == shape => Ok(v),
            Some((s, _)) => bail!(
                "fixture {}: {name} is F32 {s:?}, expected F32 {shape:?}",
                self.path
            ),
            None if self.i64s.contains_key(name) => {
                bail!(
                    "fixture {}: {name} is I64, expected F32 {shape:?}",
                    self.path
                )
            }
            None => bail!("fixture {} has no tensor {name:?}", self.path),
        }
    }
}

/// The training data, one tensor per batch: inputs `[batch, …input]` in the run dtype and
/// targets `[batch, outputs]` in the run dtype (MSE) or `[batch]` int (cross-entropy).
pub struct Data {
    inputs: Inputs,
    targets: Targets,
}

enum Inputs {
    /// MLP inputs `[batch, sizes[0]]`.
    Flat(Vec<Tensor<2>>),
    /// CNN inputs `[batch, in_channels, length]`.
    Signal(Vec<Tensor<3>>),
}

enum Targets {
    /// MSE targets `[batch, outputs]`.
    Values(Vec<Tensor<2>>),
    /// Class labels `[batch]`.
    Classes(Vec<Tensor<1, Int>>),
}

impl Data {
    /// Number of batches; step `t` (from 1) uses batch `(t − 1) mod batches`.
    pub fn batches(&self) -> usize {
        match &self.inputs {
            Inputs::Flat(v) => v.len(),
            Inputs::Signal(v) => v.len(),
        }
    }

    fn index(&self, t: u32) -> usize {
        (t as usize - 1) % self.batches()
    }
}

/// Splits `[batches, rest…]` host values into one slice per batch.
fn per_batch<T>(values: &[T], batches: usize) -> impl Iterator<Item = &[T]> {
    values.chunks_exact(values.len() / batches.max(1))
}

fn linear(
    fx: &Fixture,
    name: &str,
    inp: usize,
    out: usize,
    ty: FloatType,
    device: &Device,
) -> Result<Linear> {
    let w = fx.f32(&format!("{name}.weight"), &[out, inp])?;
    let b = fx.f32(&format!("{name}.bias"), &[out])?;
    let w = layout::torch_to_burn_linear(w, out, inp);
    Ok(Linear {
        weight: Param::from_tensor(float_tensor(&w, [inp, out], ty, device)),
        bias: Some(Param::from_tensor(float_tensor(b, [out], ty, device))),
    })
}

impl Net {
    /// Builds the model of `spec` from its fixture in the run dtype (float32 values widened
    /// exactly for F64 runs) on `device`, and the data.
    ///
    /// # Errors
    /// When the fixture lacks a tensor or holds it with another shape or dtype (parameters and `x` float32, `y` float32 for
    /// MSE or int64 for cross-entropy), or the CNN asks for candle's conv2d workaround.
    pub fn load(spec: &RunSpec, device: &Device) -> Result<(Net, Data)> {
        let fx = Fixture::read(spec)?;
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
        Ok((net, Data { inputs, targets }))
    }

    fn slots(&self) -> Vec<(String, Slot<'_>)> {
        fn lin(name: String, l: &Linear) -> Vec<(String, Slot<'_>)> {
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
            };
            out.push((name, host));
        }
        Ok(out)
    }

    /// The forward pass on the batch of step `t` (from 1): output `[batch, outputs]`.
    pub fn forward_step(&self, data: &Data, t: u32) -> Tensor<2> {
        let i = data.index(t);
        match (self, &data.inputs) {
            (Net::Mlp(m), Inputs::Flat(x)) => m.forward(x[i].clone()),
            (Net::Cnn(c), Inputs::Signal(x)) => c.forward(x[i].clone()),
            _ => unreachable!("Net::load pairs each family with its inputs"),
        }
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
        let last = self.layers.len() - 1;
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(h);
            if i < last {
                h = relu(h);
            }
        }
        h
    }
}

impl Cnn {
    /// `x` `[batch, in_channels, length]` → conv1d `[batch, channels, length − kernel + 1]`
    /// → ReLU → flatten (channel-major, like PyTorch's `flatten(1)`) → `fc` → `[batch, classes]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        let h = relu(self.conv.forward(x));
        let [b, c, l] = h.dims();
        self.fc.forward(h.reshape([b, c * l]))
    }
}

/// The batch-mean loss of step `t`'s output (see [`Loss`]): burn's `MseLoss` with
/// `Reduction::Mean`, or `CrossEntropyLoss` on logits (log-softmax, mean over samples).
/// Returns a one-element tensor.
pub fn loss(kind: Loss, out: Tensor<2>, data: &Data, t: u32, device: &Device) -> Tensor<1> {
    let i = data.index(t);
    match (kind, &data.targets) {
        (Loss::Mse, Targets::Values(y)) => {
            MseLoss::new().forward(out, y[i].clone(), Reduction::Mean)
        }
        (Loss::CrossEntropy, Targets::Classes(y)) => CrossEntropyLossConfig::new()
            .with_logits(true)
            .init(device)
            .forward(out, y[i].clone()),
        _ => unreachable!("Net::load pairs each loss with its targets"),
    }
}
