//! Op probes on the candle side: interprets a [`ProbeBatch`] and streams one `result` frame
//! per (probe, case, quantity).
//!
//! Per case: fresh tensors from the inputs' float64 values rounded once to the run dtype
//! (`DType::F16`, `BF16`, `F32` or `F64`; int64 inputs as `DType::I64`, which candle's
//! `index_select`, `gather` and the losses built on them take as they are), a [`Var`] for each
//! input with `requires_grad`, then `optimizer_steps` iterations of: `accumulate` micro-steps
//! of the steps in order (layout changes are candle views: `transpose`, `narrow` and
//! `broadcast_as` give strided tensors), the loss terms added in order and `loss.backward()`,
//! their gradients added up ([`grads`]), the gradient transforms, and the optimizer step (one
//! candle_nn optimizer object for the whole loop). With more than one iteration every
//! quantity is recorded at each and stacked along a new leading dimension (the loss and
//! forward values of several micro-steps along a micro-step dimension inside it).
//!
//! How each probe op maps onto candle's API (an op or argument the API lacks is
//! `unsupported`, with the reason; nothing missing is emulated by a composition):
//!
//! | probe op | candle 0.11.0 |
//! |---|---|
//! | `transpose`, `narrow`, `broadcast_to` | `Tensor::transpose`, `narrow`, `broadcast_as` |
//! | `unsqueeze`, `squeeze`, `reshape`, `contiguous` | `Tensor::unsqueeze`, `squeeze`, `reshape`, `contiguous` |
//! | `conv1d` | `Tensor::conv1d` |
//! | `conv2d` | `Tensor::conv2d`; unsupported when padding, stride or dilation differ per axis (it takes one value for both) |
//! | `conv_transpose1d` | `candle_nn::ConvTranspose1d` with the optional bias (`Tensor::conv_transpose1d`, its kernel layout PyTorch's, then the bias broadcast-added); candle has no backward for it (a framework error on the gradients) |
//! | `conv_transpose2d` | `candle_nn::ConvTranspose2d` with the optional bias (`Tensor::conv_transpose2d`); unsupported with groups ≠ 1 (no groups argument) or unequal per-axis pairs |
//! | `max_pool1d`, `avg_pool1d` | unsupported: candle has no 1-D pooling |
//! | `max_pool2d`, `avg_pool2d` | `Tensor::max_pool2d_with_stride`, `avg_pool2d_with_stride`; unsupported with padding ≠ 0, dilation ≠ 1 (neither argument exists) or a `ceil_mode` that changes the output size (candle rounds down); `count_include_pad` changes nothing without padding |
//! | `pad` | `Tensor::pad_with_zeros`, once per padded dimension |
//! | `linear`, `matmul` | `candle_nn::Linear`, `Tensor::matmul` |
//! | `layer_norm` | `candle_nn::ops::layer_norm` (fused) / `layer_norm_slow` |
//! | `rms_norm` | `candle_nn::ops::rms_norm` (fused) / `rms_norm_slow` |
//! | `softmax` | `candle_nn::ops::softmax_last_dim` (fused) / `softmax` |
//! | `log_softmax` | `candle_nn::ops::log_softmax` |
//! | `upsample_nearest1d`, `…2d` | `Tensor::upsample_nearest1d`, `upsample_nearest2d` |
//! | `relu`, `abs`, `tanh`, `silu`, `exp`, `log`, `sqrt` | the `Tensor` methods of the same names |
//! | `sigmoid` | `candle_nn::ops::sigmoid` |
//! | `gelu` | `Tensor::gelu_erf` (approximate none) / `Tensor::gelu` (tanh) |
//! | `elu` | `Tensor::elu(alpha)` |
//! | `add`, `sub`, `mul`, `div` | `Tensor::add`, `sub`, `mul`, `div` (equal shapes) |
//! | `maximum`, `minimum` | `Tensor::maximum`, `minimum` (equal shapes) |
//! | `sum`, `mean` | `Tensor::sum` / `sum_keepdim`, `mean` / `mean_keepdim` (several dimensions at once) |
//! | `max`, `min` | `Tensor::max` / `min` for one dimension; several (or every) dimension: successive `max_keepdim` / `min_keepdim` calls, then a reshape dropping them unless `keepdim` (candle reduces one dimension per call) |
//! | `argmax`, `argmin` | `Tensor::argmax` / `argmax_keepdim`, `argmin` / `argmin_keepdim` (U32 indices) |
//! | `sort`, `argsort` | `Tensor::sort_last_dim`, `arg_sort_last_dim` (U32 indices; the CPU kernel is Rust's stable `sort_by`, though candle documents its sort as unstable; a strided input is candle's `RequiresContiguous` error); unsupported along any other dimension |
//! | `embedding` | `candle_nn::Embedding::new(weight, d).forward(indices)` |
//! | `index_select`, `gather` | `Tensor::index_select`, `gather` |
//! | `scatter_add`, `scatter`, `index_add` | `Tensor::scatter_add`, `scatter`, `index_add` |
//! | `index_put` | `Tensor::index_add` along dimension 0 (accumulate); unsupported without accumulate |
//! | `bce_with_logits` | `candle_nn::loss::binary_cross_entropy_with_logit` |
//! | `cross_entropy`, `nll`, `mse` | `candle_nn::loss::cross_entropy`, `nll`, `mse`; unsupported with reduction sum or none (they return the mean only) |
//! | loss `sum`, `sum_squares`, `weighted_sum` | `sum_all`, `sqr().sum_all()`, `mul(w).sum_all()` |
//! | optimizer `sgd` | `candle_nn::SGD` (learning rate only): unsupported with momentum, nesterov or weight_decay ≠ 0 |
//! | optimizer `adam` | `candle_nn::AdamW` with weight decay 0 when `weight_decay` is 0 (the same update); unsupported otherwise (candle_nn has no L2-decay Adam) |
//! | optimizer `adamw` | `candle_nn::AdamW` |
//! | `accumulate` k | the `GradStore` of each of the k `loss.backward()` calls added into the first with `GradStore::extend` (candle has no accumulating `.grad`) |
//! | `micro_batches` | row m of the input: `Tensor::narrow(0, m, 1)` then `squeeze(0)` |
//! | `grad`: `scale`, `clip_value` | `Tensor::affine(s, 0)`, `Tensor::clamp(−v, v)` on each gradient |
//! | `grad`: `clip_norm` | composed (candle has no gradient clipping): `sqr`, `sum_all`, `sqrt`, `Tensor::stack`, `affine`, `recip`, `minimum`, `broadcast_mul`, as `torch.nn.utils.clip_grad_norm_` computes it |
//! | `grad`: `replace` | `GradStore::insert` of the values |
//! | `x.exp_avg`, `x.exp_avg_sq` | unsupported: `candle_nn::AdamW` keeps its moments private |
//!
//! Values in the frames: the run dtype for f32/f64, float32 for f16/bf16 runs, float64 for
//! integer quantities (candle's U32 indices), all exact widenings ([`crate::device::to_raw`]).
//!
//! Whatever candle does is an outcome, never a failure of the run: an error it returns (or a
//! panic inside it) becomes `framework-error` with its message for every quantity not yet
//! known, a gradient absent from the `GradStore` becomes `missing-gradient`, and an op,
//! argument or optimizer setting candle's API lacks makes every quantity of the case
//! `unsupported` (an optimizer state slot: that quantity only). Only a malformed spec, a
//! device that cannot be opened or a failing sink ends the run with an error.

mod grads;
mod ops;
mod outcome;
mod stepper;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io::Write;

use anyhow::{anyhow, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use parity_common::frames::{meta, FrameWriter};
use parity_common::probe_spec::{
    result_meta, CaseSpec, InputKind, InputSpec, LossTerm, ProbeBatch, ProbeSpec, Quantity, Status,
};
use parity_common::spec::DeviceKind;

use crate::device::{self, to_raw};
pub use outcome::Outcome;
use outcome::{guarded, Fault, Step};
use stepper::Stepper;

fn lookup<'a>(env: &'a HashMap<String, Tensor>, name: &str) -> Step<&'a Tensor> {
    env.get(name)
        .ok_or_else(|| Fault::Spec(anyhow!("{name:?} is not defined")))
}

fn loss_term(term: &LossTerm, env: &HashMap<String, Tensor>) -> Step<Tensor> {
    Ok(match term {
        LossTerm::Sum { input } => lookup(env, input)?.sum_all()?,
        LossTerm::SumSquares { input } => lookup(env, input)?.sqr()?.sum_all()?,
        LossTerm::WeightedSum { input, weights } => {
            lookup(env, input)?.mul(lookup(env, weights)?)?.sum_all()?
        }
    })
}

/// The forward pass of a case: every named tensor, and the loss if the case has one.
fn forward(
    case: &CaseSpec,
    mut env: HashMap<String, Tensor>,
) -> Step<(HashMap<String, Tensor>, Option<Tensor>)> {
    for step in &case.steps {
        let inputs = step
            .inputs
            .iter()
            .map(|n| lookup(&env, n))
            .collect::<Step<Vec<_>>>()?;
        let out = ops::apply(&step.op, &inputs)?;
        env.insert(step.out.clone(), out);
    }
    let loss = match &case.loss {
        None => None,
        Some(terms) => {
            let mut total: Option<Tensor> = None;
            for term in terms {
                let t = loss_term(term, &env)?;
                total = Some(match total {
                    None => t,
                    Some(acc) => acc.add(&t)?,
                });
            }
            total
        }
    };
    Ok((env, loss))
}

/// An input as a tensor on `dev`: float values rounded once from float64 to `dt`, int64
/// values as `DType::I64`.
fn input_tensor(input: &InputSpec, dt: DType, dev: &Device) -> Step<Tensor> {
    let host = Tensor::from_vec(input.values.clone(), input.shape.as_slice(), &Device::Cpu)?;
    let t = match input.dtype {
        InputKind::Float => host.to_dtype(dt)?,
        InputKind::Int64 => host.to_dtype(DType::I64)?,
    };
    Ok(t.to_device(dev)?)
}

/// A detached copy: the optimizer overwrites a `Var`'s storage in place, and views of it
/// share that storage, so a recorded value must not alias it.
fn snapshot(t: &Tensor) -> Step<Tensor> {
    Ok(t.detach().copy()?)
}

/// One quantity's rows (one per iteration) or the outcome that ended it.
#[derive(Default)]
struct Slot {
    rows: Vec<Tensor>,
    end: Option<Outcome>,
}

/// The recorded quantities of one case.
struct Record {
    slots: Vec<Slot>,
    iterations: usize,
}

impl Record {
    fn push(&mut self, i: usize, t: &Tensor) -> Step<()> {
        if self.slots[i].end.is_none() {
            let row = snapshot(t)?;
            self.slots[i].rows.push(row);
        }
        Ok(())
    }

    fn end(&mut self, i: usize, outcome: Outcome) {
        self.slots[i].end.get_or_insert(outcome);
    }

    /// Ends every quantity that still lacks a row with the outcome of a fault.
    fn fail(&mut self, fault: Fault) -> Result<()> {
        let outcome = match fault {
            Fault::Spec(e) => return Err(e),
            Fault::Framework(m) => Outcome::FrameworkError(m),
            Fault::Unsupported(m) => Outcome::Unsupported(m),
        };
        for slot in &mut self.slots {
            if slot.end.is_none() && slot.rows.len() < self.iterations {
                slot.end = Some(outcome.clone());
            }
        }
        Ok(())
    }

    /// Every quantity's outcome: its end, its one row, or its rows stacked.
    fn finish(self, compare: &[String]) -> Result<Vec<Outcome>> {
        let n = self.iterations;
        self.slots
            .into_iter()
            .zip(compare)
            .map(|(slot, q)| match slot.end {
                Some(o) => Ok(o),
                None if slot.rows.len() != n => Err(anyhow!("quantity {q:?} was not computed")),
                None if n == 1 => Ok(Outcome::Ok(slot.rows[0].clone())),
                None => Ok(match Tensor::stack(&slot.rows, 0) {
                    Ok(t) => Outcome::Ok(t),
                    Err(e) => Outcome::FrameworkError(e.to_string()),
                }),
            })
            .collect()
    }
}

/// The outcomes of one case, in its `compare` order.
///
/// # Errors
/// Only for a spec that cannot run (a name that is not defined, an invalid quantity);
/// candle's own errors and panics, and what its API lacks, are outcomes.
pub fn run_case(spec: &ProbeSpec, case: &CaseSpec, dev: &Device) -> Result<Vec<Outcome>> {
    let dt = device::probe_dtype(spec.dtype);
    let quantities = case.quantities()?;
    let mut rec = Record {
        slots: quantities.iter().map(|_| Slot::default()).collect(),
        iterations: case.optimizer_steps,
    };
    let mut consts = HashMap::new();
    let mut vars: Vec<(String, Var)> = Vec::new();
    for input in &spec.inputs {
        let t = match guarded(|| input_tensor(input, dt, dev)) {
            Ok(t) => t,
            Err(f) => {
                rec.fail(f)?;
                return rec.finish(&case.compare);
            }
        };
        if input.requires_grad {
            vars.push((input.name.clone(), Var::from_tensor(&t)?));
        } else {
            consts.insert(input.name.clone(), t);
        }
    }
    let var = |name: &str| {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| anyhow!("{name:?} is no Var"))
    };
    let mut stepper = match &case.optimizer {
        None => None,
        Some(o) => {
            let trained = vars.iter().map(|(_, v)| v.clone()).collect();
            match guarded(|| Stepper::new(o, trained)) {
                Ok(s) => Some(s),
                Err(f) => {
                    rec.fail(f)?;
                    return rec.finish(&case.compare);
                }
            }
        }
    };
    for (i, q) in quantities.iter().enumerate() {
        if let Quantity::State(_, slot) = q {
            rec.end(i, Outcome::Unsupported(stepper::state_unsupported(*slot)));
        }
    }
    let k = case.accumulate;
    'steps: for it in 0..case.optimizer_steps {
        let mut acc: Option<GradStore> = None;
        // The loss and forward values of each micro-step, stacked once all k are there.
        let mut micro: Vec<Vec<Tensor>> = quantities.iter().map(|_| Vec::new()).collect();
        for j in 0..k {
            let mut env = consts.clone();
            for (n, v) in &vars {
                env.insert(n.clone(), v.as_tensor().clone());
            }
            let pass = guarded(|| {
                env.extend(grads::micro_rows(&case.micro_batches, &consts, it * k + j)?);
                let (env, loss) = forward(case, env)?;
                for (i, q) in quantities.iter().enumerate() {
                    let t = match q {
                        Quantity::Loss => loss
                            .as_ref()
                            .ok_or_else(|| Fault::Spec(anyhow!("no loss")))?,
                        Quantity::Value(n) => lookup(&env, n)?,
                        _ => continue,
                    };
                    micro[i].push(snapshot(t)?);
                    if micro[i].len() == k {
                        let rows = std::mem::take(&mut micro[i]);
                        let t = if k == 1 {
                            rows[0].clone()
                        } else {
                            Tensor::stack(&rows, 0)?
                        };
                        rec.push(i, &t)?;
                    }
                }
                if let Some(loss) = loss {
                    grads::accumulate(&mut acc, loss.backward()?)?;
                }
                Ok(())
            });
            if let Err(f) = pass {
                rec.fail(f)?;
                break 'steps;
            }
        }
        let Some(mut grads) = acc else { continue };
        let step = guarded(|| {
            grads::transform(&mut grads, &vars, &case.grad_transforms)?;
            for (i, q) in quantities.iter().enumerate() {
                if let Quantity::Grad(n) = q {
                    let v = var(n).map_err(Fault::Spec)?;
                    match grads.get(v.as_tensor()) {
                        Some(g) => rec.push(i, g)?,
                        None => rec.end(i, Outcome::MissingGradient),
                    }
                }
            }
            if let Some(s) = stepper.as_mut() {
                s.step(&grads)?;
            }
            for (i, q) in quantities.iter().enumerate() {
                if let Quantity::AfterStep(n) = q {
                    rec.push(i, var(n).map_err(Fault::Spec)?.as_tensor())?;
                }
            }
            Ok(())
        });
        if let Err(f) = step {
            rec.fail(f)?;
            break;
        }
    }
    rec.finish(&case.compare)
}

/// The device of `kind`, opened on its first use in the batch.
fn device_for(opened: &mut Vec<(DeviceKind, Device)>, kind: DeviceKind) -> Result<Device> {
    if let Some((_, d)) = opened.iter().find(|(k, _)| *k == kind) {
        return Ok(d.clone());
    }
    let d = device::open(kind)?;
    opened.push((kind, d.clone()));
    Ok(d)
}

/// Runs every case of every probe of `batch` and writes its frames to `sink`: a header
/// (describing the first probe's device; the CPU for an empty batch), one `result` frame per
/// (probe, case, quantity) in order, and an `end` frame. Each device is opened once.
///
/// A `result` frame's metadata is [`result_meta`] (status `ok`, `missing-gradient`,
/// `framework-error` or `unsupported`); with status `ok` it holds one tensor `values` with
/// the quantity's shape, in the run dtype (float32 for f16/bf16 runs, float64 for integer
/// quantities).
///
/// # Errors
/// An unavailable device, a spec that cannot run, or a failing sink.
pub fn run<W: Write>(batch: &ProbeBatch, sink: W) -> Result<()> {
    let mut opened = Vec::new();
    let first = batch.probes.first().map_or(DeviceKind::Cpu, |p| p.device);
    let dev = device_for(&mut opened, first)?;
    let mut out = FrameWriter::new(sink);
    out.write_meta(crate::train::header_meta(&dev))?;
    for spec in &batch.probes {
        let dev = device_for(&mut opened, spec.device)?;
        for case in &spec.cases {
            let outcomes = run_case(spec, case, &dev)?;
            for (q, outcome) in case.compare.iter().zip(outcomes) {
                let (status, message, tensor) = match outcome {
                    Outcome::Ok(t) => (Status::Ok, String::new(), Some(t)),
                    Outcome::MissingGradient => (Status::MissingGradient, String::new(), None),
                    Outcome::FrameworkError(m) => (Status::FrameworkError, m, None),
                    Outcome::Unsupported(m) => (Status::Unsupported, m, None),
                };
                eprintln!(
                    "{} {} {q}: {} {message}",
                    spec.probe,
                    case.name,
                    status.name()
                );
                let m = result_meta(&spec.probe, &case.name, q, status, &message);
                let mut tensors = Vec::new();
                if let Some(t) = tensor {
                    let mut raw = to_raw(&t)?;
                    raw.shape = t.dims().to_vec();
                    tensors.push(("values".to_string(), raw));
                }
                out.write(m, tensors)?;
            }
        }
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    out.finish()
}
