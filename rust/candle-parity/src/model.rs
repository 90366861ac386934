//! The model families, built from hand-made `Var`s as in the study, and the fixture loader.
//!
//! Parameter names and layouts are PyTorch's (`fc1.weight` is `[out, in]`, `conv.weight` is
//! `[out, in, k]`), which is also candle's own layout, so no transposes are needed. The MLP
//! and the CNN are written with tensor ops on the `Var`s; the transformer
//! ([`crate::transformer`]) with candle-nn's `Embedding`, `Linear` and layer norms over them.
//!
//! One forward pass serves training ([`Net::forward`]) and the replay
//! ([`Net::forward_tapped`], which also returns the named intermediates and a zero tap on
//! each for their gradients). The frames read the parameters and their gradients through
//! parity-common's [`Parameters`], which [`Net`] implements.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use parity_common::frames::RawTensor;
use parity_common::optim::Parameters;
use parity_common::spec::{Activation, ConvImpl, Fault, FloatType, Loss, Model, RunSpec};

use crate::device;
use crate::transformer::{check_tokens, Config, Transformer};

/// A model: its family, its trainable parameters in state_dict order, and the run's fault
/// ([`Fault::TransposedWeight`] is the one the forward pass applies).
pub struct Net {
    model: Model,
    params: Vec<(String, Var)>,
    fault: Fault,
}

/// The training data: for the MLP and CNN `x` `[batches, batch, …]` in the run dtype and `y`
/// either `[batches, batch, outputs]` in the run dtype (MSE) or `[batches, batch]` int64
/// (cross-entropy); for the transformer token ids `x` and next tokens `y`, both
/// `[batches, batch, T]` int64.
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
    /// The transformer's `x` and `y` stay int64 (token ids) and must be `[batches, batch, T]`
    /// alike, T ≤ seq_len, every id in `0..vocab`.
    ///
    /// # Errors
    /// When the fixture lacks a tensor, holds it with another shape, or not as float32
    /// (int64 for class labels and token ids), or holds a token id outside the vocabulary;
    /// for an own model ([`Model::Own`], which `candle_parity::own` runs).
    pub fn load(spec: &RunSpec, dev: &Device) -> Result<(Net, Data)> {
        if spec.model.is_own() {
            bail!("an own model runs in its own runner (candle_parity::own), not candle-parity");
        }
        let tensors = candle_core::safetensors::load(&spec.fixture, &Device::Cpu)
            .with_context(|| format!("reading fixture {}", spec.fixture.display()))?;
        let dt = device::dtype(spec.dtype);
        let mut params = Vec::with_capacity(spec.params.len());
        for p in &spec.params {
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
        let data = match Config::of(&spec.model) {
            Some(cfg) => {
                let at =
                    |e: anyhow::Error| e.context(format!("fixture {}", spec.fixture.display()));
                check_tokens("x", x, &cfg).map_err(at)?;
                check_tokens("y", y, &cfg).map_err(at)?;
                if x.dims() != y.dims() {
                    bail!(
                        "fixture {}: x is {:?} and y {:?}; the next tokens have the inputs' shape",
                        spec.fixture.display(),
                        x.dims(),
                        y.dims()
                    );
                }
                Data {
                    x: x.to_device(dev)?,
                    y: y.to_device(dev)?,
                }
            }
            None => Self::float_data(spec, x, y, dt, dev)?,
        };
        Ok((
            Net {
                model: spec.model.clone(),
                params,
                fault: spec.fault,
            },
            data,
        ))
    }

    /// The data of the MLP and CNN: `x` float32 converted to `dt`, `y` float32 (MSE,
    /// converted) or int64 (cross-entropy).
    fn float_data(spec: &RunSpec, x: &Tensor, y: &Tensor, dt: DType, dev: &Device) -> Result<Data> {
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
        Ok(Data {
            x: x.to_dtype(dt)?.to_device(dev)?,
            y: y.to_device(dev)?,
        })
    }

    /// The trainable parameters in state_dict order.
    pub fn params(&self) -> &[(String, Var)] {
        &self.params
    }

    /// The `Var`s, for the optimizer.
    pub fn vars(&self) -> Vec<Var> {
        self.params.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The transformer's modules over this net's parameters (see [`Transformer::new`]), for
    /// a direct look at its parts (e.g. [`Transformer::attention`]).
    ///
    /// # Errors
    /// When the model is not a [`Model::Transformer`].
    pub fn transformer(&self) -> Result<Transformer> {
        let cfg = Config::of(&self.model).context("the model is not a transformer")?;
        Transformer::new(cfg, |name| self.get(name))
    }

    fn get(&self, name: &str) -> Result<&Var> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .with_context(|| format!("no parameter {name}"))
    }

    /// The forward pass: `x` `[batch, …input]` (run dtype) → output `[batch, outputs]`; for
    /// the transformer token ids `[batch, T]` int64 → logits `[batch, T, vocab]` (run dtype).
    ///
    /// With [`Fault::TransposedWeight`] every square MLP weight is used as `W` instead of
    /// `Wᵀ` (the shapes still fit, which is why the mistake runs). This is the pass
    /// [`crate::train::run`] differentiates; it adds no op to the graph beyond the model's.
    ///
    /// # Errors
    /// On shape mismatches (which [`Net::load`] rules out for fixture data), or what candle
    /// refuses: a float64 transformer with the fused layer norm fails with candle's
    /// `unsupported dtype for rmsnorm F64` (see [`crate::transformer`]).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, &mut |_, h| Ok(h))
    }

    /// The forward pass of [`Net::forward`] with a zero tap on every named intermediate, for
    /// the replay ([`crate::replay`]): each quantity of
    /// [`parity_common::replay::forward_names`] but `loss` (MLP `fc{i}.out` before the
    /// activation and `relu{i}.out`; CNN `conv.out` `[batch, channels, length − kernel + 1]`
    /// with the bias, `relu.out` before flattening, `fc.out`; transformer every named
    /// intermediate of [`Transformer::forward_with`], from `tok_emb.out` to the logits
    /// `head.out` `[batch, T, vocab]`) is replaced by `h + tap`,
    /// where `tap` is a `Var` of `h`'s shape, dtype and device holding −0.0.
    ///
    /// Adding −0.0 is the identity of IEEE 754 addition for every value, −0.0 included
    /// (+0.0 would turn −0.0 into +0.0), so every value, the output's included, is bit for
    /// bit that of [`Net::forward`]. The `Add` backward hands the incoming gradient to both
    /// operands unchanged, so `grads.get(tap)` is d loss / d h, which candle's backward
    /// otherwise drops (it keeps the gradients of `Var`s only), and the gradients of the
    /// parameters are unchanged (`tests/replay.rs` checks both against `train`).
    ///
    /// # Errors
    /// As [`Net::forward`], or when a tap cannot be allocated.
    pub fn forward_tapped(&self, x: &Tensor) -> Result<Tapped> {
        let mut forward = Vec::new();
        let mut taps = Vec::new();
        let output = self.forward_with(x, &mut |name, h| {
            let tap = Var::from_tensor(&h.zeros_like()?.neg()?)?;
            let h = (h + tap.as_tensor())?;
            forward.push((name.to_string(), h.clone()));
            taps.push((name.to_string(), tap));
            Ok(h)
        })?;
        Ok(Tapped {
            output,
            forward,
            taps,
        })
    }

    /// The forward pass, calling `at(name, h)` on each named intermediate `h` (see
    /// [`Net::forward_tapped`]) and continuing with what it returns.
    fn forward_with(
        &self,
        x: &Tensor,
        at: &mut dyn FnMut(&str, Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        match &self.model {
            Model::Mlp { sizes, activation } => {
                let layers = sizes.len() - 1;
                let mut h = x.clone();
                for i in 1..=layers {
                    let w = self.get(&format!("fc{i}.weight"))?;
                    let b = self.get(&format!("fc{i}.bias"))?;
                    let square = w.dims()[0] == w.dims()[1];
                    h = if self.fault == Fault::TransposedWeight && square {
                        h.matmul(w.as_tensor())?
                    } else {
                        h.matmul(&w.t()?)?
                    }
                    .broadcast_add(b)?;
                    h = at(&format!("fc{i}.out"), h)?;
                    if i < layers {
                        h = activate(&h, *activation)?;
                        h = at(&format!("{}{i}.out", activation_name(*activation)), h)?;
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
                let h = at("conv.out", h)?;
                let h = activate(&h, *activation)?;
                let h = at(&format!("{}.out", activation_name(*activation)), h)?;
                let h = h.flatten_from(1)?;
                let fw = self.get("fc.weight")?;
                let fb = self.get("fc.bias")?;
                let out = h.matmul(&fw.t()?)?.broadcast_add(fb)?;
                at("fc.out", out)
            }
            Model::Transformer { .. } => self.transformer()?.forward_with(x, at),
            Model::Own { .. } => bail!("an own model runs in candle_parity::own"),
        }
    }
}

/// The frames' copies of a candle net: each `Var` in state_dict order, copied by
/// [`device::to_raw`] (flattened; candle's layout is PyTorch's, and [`Net::load`] has put every
/// parameter in the run dtype, so `ty` needs no conversion and is not consulted).
impl Parameters for Net {
    type Grads = GradStore;

    /// # Errors
    /// When a device copy fails.
    fn frame_params(
        &self,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_vars(&self.params, keep)
    }

    /// The `GradStore`'s entry of each kept `Var`; a parameter a fused op cut off from the loss
    /// (see [`crate::transformer`]) has none.
    ///
    /// # Errors
    /// When a device copy fails.
    fn frame_grads(
        &self,
        grads: &GradStore,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<(String, RawTensor)>> {
        device::frame_var_grads(&self.params, grads, keep)
    }
}

/// A forward pass with taps ([`Net::forward_tapped`]).
pub struct Tapped {
    /// The model's output `[batch, outputs]`, bit for bit that of [`Net::forward`].
    pub output: Tensor,
    /// Each named intermediate (after its tap), in forward order, named as
    /// [`parity_common::replay::forward_names`] names it (without `loss`).
    pub forward: Vec<(String, Tensor)>,
    /// The tap of each intermediate, same order and names: `grads.get(tap)` after
    /// `loss.backward()` is d loss / d intermediate.
    pub taps: Vec<(String, Var)>,
}

/// The name of an activation in module paths (`relu`), as PyTorch's model names it.
fn activation_name(a: Activation) -> &'static str {
    match a {
        Activation::Relu => "relu",
    }
}

fn activate(h: &Tensor, a: Activation) -> Result<Tensor> {
    Ok(match a {
        Activation::Relu => h.relu()?,
    })
}

/// The batch-mean loss of `out` against `y` (see [`Loss`]); with [`Fault::MseSum`] the
/// MSE is summed over the elements instead (`candle_nn::loss::mse` with `sum_all` for its
/// `mean_all`). Other faults do not concern the loss.
///
/// Cross-entropy takes `out` `[n, classes]` and int64 labels `y` `[n]`; the transformer's
/// logits `[B, T, V]` and next tokens `[B, T]` are reshaped to `[B·T, V]` and `[B·T]` first,
/// so the loss is the mean over batch × sequence
/// (`candle_nn::loss::cross_entropy(logits.reshape((B*T, V)), y.reshape(B*T))`).
///
/// # Errors
/// On shape or dtype mismatches.
pub fn loss(kind: Loss, out: &Tensor, y: &Tensor, fault: Fault) -> Result<Tensor> {
    Ok(match kind {
        Loss::Mse if fault == Fault::MseSum => (out - y)?.sqr()?.sum_all()?,
        Loss::Mse => candle_nn::loss::mse(out, y)?,
        Loss::CrossEntropy if out.rank() == 3 => {
            let (b, t, v) = out.dims3()?;
            candle_nn::loss::cross_entropy(&out.reshape((b * t, v))?, &y.reshape(b * t)?)?
        }
        Loss::CrossEntropy => candle_nn::loss::cross_entropy(out, y)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use parity_common::spec::Activation;

    fn square_net(fault: Fault) -> Result<Net> {
        let dev = Device::Cpu;
        let var = |v: &[f32], shape: &[usize]| -> Result<Var> {
            Ok(Var::from_tensor(&Tensor::new(v, &dev)?.reshape(shape)?)?)
        };
        Ok(Net {
            model: Model::Mlp {
                sizes: vec![2, 2, 1],
                activation: Activation::Relu,
            },
            params: vec![
                ("fc1.weight".into(), var(&[1.0, 2.0, -3.0, 4.0], &[2, 2])?),
                ("fc1.bias".into(), var(&[0.0, 0.0], &[2])?),
                ("fc2.weight".into(), var(&[1.0, 1.0], &[1, 2])?),
                ("fc2.bias".into(), var(&[0.0], &[1])?),
            ],
            fault,
        })
    }

    #[test]
    fn transposed_weight_fault_uses_the_square_weight_as_is() -> Result<()> {
        let x = Tensor::new(&[[1f32, 1.0]], &Device::Cpu)?;
        // W·x = [3, 1] → relu sum 4; Wᵀ·x = [-2, 6] → 6.
        let clean = square_net(Fault::None)?.forward(&x)?.to_vec2::<f32>()?;
        let faulty = square_net(Fault::TransposedWeight)?
            .forward(&x)?
            .to_vec2::<f32>()?;
        assert_eq!(clean, vec![vec![4.0]]);
        assert_eq!(faulty, vec![vec![6.0]]);
        Ok(())
    }

    /// The taps change no value and carry the intermediates' gradients; their names are the
    /// contract's.
    #[test]
    fn taps_change_no_value_and_carry_the_gradients() -> Result<()> {
        let net = square_net(Fault::None)?;
        let x = Tensor::new(&[[1f32, 1.0], [-0.5, 2.0]], &Device::Cpu)?;
        let tapped = net.forward_tapped(&x)?;
        let bits = |t: &Tensor| -> Result<Vec<u32>> {
            Ok(t.flatten_all()?
                .to_vec1::<f32>()?
                .iter()
                .map(|v| v.to_bits())
                .collect())
        };
        assert_eq!(bits(&tapped.output)?, bits(&net.forward(&x)?)?);
        let mut names: Vec<String> = tapped.forward.iter().map(|(n, _)| n.clone()).collect();
        names.push("loss".into());
        assert_eq!(names, parity_common::replay::forward_names(&net.model));
        for (_, tap) in &tapped.taps {
            assert!(bits(tap.as_tensor())?
                .iter()
                .all(|&b| b == (-0f32).to_bits()));
        }
        // d sum(out) / d fc2.out is one everywhere.
        let grads = tapped.output.sum_all()?.backward()?;
        let g = grads
            .get(&tapped.taps[2].1)
            .expect("fc2.out's tap has a gradient");
        assert_eq!(g.to_vec2::<f32>()?, vec![vec![1.0], vec![1.0]]);
        // Why −0.0: it is the additive identity for −0.0 too, where +0.0 is not.
        let h = Tensor::new(&[-0f32, 0.0, 1.5], &Device::Cpu)?;
        let minus = (&h + h.zeros_like()?.neg()?)?;
        let plus = (&h + h.zeros_like()?)?;
        assert_eq!(bits(&minus)?, bits(&h)?);
        assert_ne!(bits(&plus)?, bits(&h)?);
        Ok(())
    }

    #[test]
    fn mse_sum_fault_sums_instead_of_averaging() -> Result<()> {
        let dev = Device::Cpu;
        let out = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev)?;
        let y = Tensor::zeros((2, 2), DType::F32, &dev)?;
        let mean = loss(Loss::Mse, &out, &y, Fault::None)?.to_scalar::<f32>()?;
        let sum = loss(Loss::Mse, &out, &y, Fault::MseSum)?.to_scalar::<f32>()?;
        assert_eq!((mean, sum), (7.5, 30.0));
        Ok(())
    }
}
