//! The model families, built from hand-made `Var`s as in the study, and the fixture loader.
//!
//! Parameter names and layouts are PyTorch's (`fc1.weight` is `[out, in]`, `conv.weight` is
//! `[out, in, k]`), which is also candle's own layout, so no transposes are needed.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use parity_common::spec::{Activation, ConvImpl, Loss, Model, RunSpec};

use crate::device;

/// A model: its family and its trainable parameters in state_dict order.
pub struct Net {
    model: Model,
    params: Vec<(String, Var)>,
}

/// The training data: `x` `[batches, batch, …]` in the run dtype and `y` either
/// `[batches, batch, outputs]` in the run dtype (MSE) or `[batches, batch]` int64 (cross-entropy).
pub struct Data {
    /// Inputs.
    pub x: Tensor,
    /// Targets.
    pub y: Tensor,
}

impl Data {
    /// Number of batches; step `t` (from 1) uses batch `(t − 1) mod batches`.
    pub fn batches(&self) -> usize {
        self.x.dims()[0]
    }

    /// The batch used at step `t` (t ≥ 1): `(x, y)`.
    ///
    /// # Errors
    /// Only on internal indexing failures.
    pub fn batch(&self, t: u32) -> Result<(Tensor, Tensor)> {
        let i = (t as usize - 1) % self.batches();
        Ok((self.x.get(i)?, self.y.get(i)?))
    }
}

fn fixture_tensor<'a>(
    tensors: &'a HashMap<String, Tensor>,
    name: &str,
    spec: &RunSpec,
) -> Result<&'a Tensor> {
    tensors
        .get(name)
        .with_context(|| format!("fixture {} has no tensor {name:?}", spec.fixture.display()))
}

impl Net {
    /// Loads parameters and data from the run's fixture, converts them to the run dtype
    /// (float32 values widened exactly for F64 runs) and moves them to `dev`.
    ///
    /// # Errors
    /// When the spec's parameter list differs from the family's, or the fixture lacks a
    /// tensor, holds it with another shape, or not as float32 (int64 for class labels).
    pub fn load(spec: &RunSpec, dev: &Device) -> Result<(Net, Data)> {
        let expected = spec.model.params();
        if expected != spec.params {
            bail!(
                "the spec's parameters {:?} differ from what the {:?} family declares {:?}",
                spec.params,
                spec.model,
                expected
            );
        }
        let tensors = candle_core::safetensors::load(&spec.fixture, &Device::Cpu)
            .with_context(|| format!("reading fixture {}", spec.fixture.display()))?;
        let dt = device::dtype(spec.dtype);
        let mut params = Vec::with_capacity(expected.len());
        for p in &expected {
            let t = fixture_tensor(&tensors, &p.name, spec)?;
            if t.dtype() != DType::F32 || t.dims() != p.shape.as_slice() {
                bail!(
                    "fixture {}: {} is {:?} {:?}, expected F32 {:?}",
                    spec.fixture.display(),
                    p.name,
                    t.dtype(),
                    t.dims(),
                    p.shape
                );
            }
            let v = Var::from_tensor(&t.to_dtype(dt)?.to_device(dev)?)?;
            params.push((p.name.clone(), v));
        }
        let x = fixture_tensor(&tensors, "x", spec)?;
        let y = fixture_tensor(&tensors, "y", spec)?;
        let y_dtype = match spec.loss {
            Loss::Mse => DType::F32,
            Loss::CrossEntropy => DType::I64,
        };
        if x.dtype() != DType::F32 || y.dtype() != y_dtype {
            bail!(
                "fixture {}: x is {:?} and y is {:?}; expected F32 and {:?}",
                spec.fixture.display(),
                x.dtype(),
                y.dtype(),
                y_dtype
            );
        }
        let y = if y_dtype == DType::F32 {
            y.to_dtype(dt)?
        } else {
            y.clone()
        };
        let data = Data {
            x: x.to_dtype(dt)?.to_device(dev)?,
            y: y.to_device(dev)?,
        };
        Ok((
            Net {
                model: spec.model.clone(),
                params,
            },
            data,
        ))
    }

    /// The trainable parameters in state_dict order.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The `Var`s, for the optimizer.
    pub fn vars(&self) -> Vec<Var> {
        self.params.iter().map(|(_, v)| v.clone()).collect()
    }

    fn get(&self, name: &str) -> Result<&Var> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .with_context(|| format!("no parameter {name}"))
    }

    /// The forward pass: `x` `[batch, …input]` → output `[batch, outputs]`.
    ///
    /// # Errors
    /// On shape mismatches (which [`Net::load`] rules out for fixture data).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match &self.model {
            Model::Mlp { sizes, activation } => {
                let layers = sizes.len() - 1;
                let mut h = x.clone();
                for i in 1..=layers {
                    let w = self.get(&format!("fc{i}.weight"))?;
                    let b = self.get(&format!("fc{i}.bias"))?;
                    h = h.matmul(&w.t()?)?.broadcast_add(b)?;
                    if i < layers {
                        h = activate(&h, *activation)?;
                    }
                }
                Ok(h)
            }
            Model::Cnn1d {
                channels,
                activation,
                conv_impl,
                ..
            } => {
                let w = self.get("conv.weight")?;
                let b = self.get("conv.bias")?;
                let conv = match conv_impl {
                    // [b, c, l] → [b, c, 1, l] with kernel [o, c, 1, k], then back.
                    ConvImpl::Conv2d => x
                        .unsqueeze(2)?
                        .conv2d(&w.unsqueeze(2)?, 0, 1, 1, 1)?
                        .squeeze(2)?,
                    ConvImpl::Conv1d => x.conv1d(w, 0, 1, 1, 1)?,
                };
                let h = conv.broadcast_add(&b.reshape((1, *channels, 1))?)?;
                let h = activate(&h, *activation)?.flatten_from(1)?;
                let fw = self.get("fc.weight")?;
                let fb = self.get("fc.bias")?;
                Ok(h.matmul(&fw.t()?)?.broadcast_add(fb)?)
            }
        }
    }
}

fn activate(h: &Tensor, a: Activation) -> Result<Tensor> {
    Ok(match a {
        Activation::Relu => h.relu()?,
    })
}

/// The batch-mean loss of `out` against `y` (see [`Loss`]).
///
/// # Errors
/// On shape or dtype mismatches.
pub fn loss(kind: Loss, out: &Tensor, y: &Tensor) -> Result<Tensor> {
    Ok(match kind {
        Loss::Mse => candle_nn::loss::mse(out, y)?,
        Loss::CrossEntropy => candle_nn::loss::cross_entropy(out, y)?,
    })
}
