//! Op probes on the burn side: interprets a [`ProbeBatch`] with burn's ndarray backend and
//! autodiff and streams one `result` frame per (probe, case, quantity), as `candle-parity
//! probe` does (metadata [`result_meta`]).
//!
//! Per case ([`run_case`]): fresh tensors from the inputs' float64 values rounded once to
//! the run dtype (int64 inputs as burn `Tensor<D, Int>` of dtype `I64`; each float input
//! with `requires_grad` a burn `Param`, gathered in one module so that burn's optimizers can
//! step them), then `optimizer_steps` iterations of the steps in order, the loss terms added
//! in order, `loss.backward()` and an optional optimizer step with ONE burn optimizer (built
//! by [`Stepper::for_probe`]); with more than one iteration every quantity is stacked along a
//! new leading dimension. Optimizer state (`exp_avg`, `exp_avg_sq`, `momentum_buffer`) is
//! read out of burn's optimizer record ([`crate::moments`]).
//!
//! burn's tensors carry their rank in their type, a probe's only at run time: the
//! interpreter holds ranks 1 to 4 ([`dyn_tensor`]). How each op maps onto burn 0.22.1's API:
//!
//! | probe op | burn 0.22.1 |
//! |---|---|
//! | `transpose`, `narrow`, `broadcast_to` | `swap_dims`, `narrow`, `expand` (float or int) |
//! | `unsqueeze`, `squeeze`, `reshape` | `unsqueeze_dim`, `squeeze_dim`, `reshape` (float or int) |
//! | `contiguous` | unsupported: burn's tensor API has no contiguous copy |
//! | `conv1d`, `conv2d` | `tensor::module::conv1d` / `conv2d`, no bias, `ConvOptions` |
//! | `conv_transpose1d`, `conv_transpose2d` | `tensor::module::conv_transpose1d` / `conv_transpose2d` with the optional bias, `ConvTransposeOptions` (`padding_out` = `output_padding`; burn's weight layout is PyTorch's `[c_in, c_out/groups, k…]`) |
//! | `max_pool1d`, `max_pool2d` | `tensor::module::max_pool1d` / `max_pool2d`, `MaxPoolOptions::new(kernel).with_stride(..).with_padding(..).with_dilation(..).with_ceil_mode(..)` |
//! | `avg_pool1d`, `avg_pool2d` | `tensor::module::avg_pool1d` / `avg_pool2d`, `AvgPoolOptions::new(kernel).with_stride(..).with_padding(..).with_count_include_pad(..).with_ceil_mode(..)` |
//! | `pad` | `Tensor::pad` with the `(before, after)` pairs of the last dimensions, `PadMode::Constant(0.0)` |
//! | `linear` | `tensor::module::linear(x, w.transpose(), b)`: burn's weight is `[in, out]` |
//! | `matmul` | `matmul` (equal ranks) |
//! | `layer_norm`, `softmax` | `tensor::module::layer_norm`, `activation::softmax` (one function each: the `candle` argument is ignored) |
//! | `rms_norm` | `nn::RmsNorm::forward` with the weight as its `gamma` (the `candle` argument is ignored) |
//! | `log_softmax` | `activation::log_softmax` |
//! | `upsample_nearest1d`, `…2d` | `nn::interpolate::Interpolate1d` / `Interpolate2d`, mode `Nearest` |
//! | `relu`, `sigmoid`, `tanh`, `silu`, `elu` | `activation::relu`, `sigmoid`, `tanh`, `silu`, `elu(x, alpha)` |
//! | `gelu` none / tanh | `activation::gelu` / `activation::gelu_approximate` |
//! | `abs`, `exp`, `log`, `sqrt` | `abs`, `exp`, `log`, `sqrt` |
//! | `add`, `sub`, `mul`, `div` | `+`, `-`, `*`, `/` (equal shapes; unequal ones are refused as PyTorch's interpreter refuses them) |
//! | `maximum`, `minimum` | `Tensor::max_pair`, `min_pair` (equal shapes) |
//! | `sum`, `mean`, `max`, `min` | every dimension without `keepdim`: `sum()`, `mean()`, `max()`, `min()` (shape `[1]`); otherwise `sum_dims`, `mean_dims`, `max_dims`, `min_dims` (burn keeps the reduced dimensions), then `squeeze_dims` of them without `keepdim` (burn's own `sum_dims_squeeze` is that composition) |
//! | `argmax`, `argmin` | `argmax(dim)` / `argmin(dim)` (burn keeps the dimension), `squeeze_dim` without `keepdim` (a rank-1 input stays `[1]`: burn has no rank 0); int64 result sent as float64 |
//! | `sort`, `argsort` | `sort` / `sort_descending`, `argsort` / `argsort_descending` (burn documents its sort as unstable) |
//! | `embedding` | `tensor::module::embedding(weight, indices)`: burn takes `[batch, seq]` indices only (other ranks unsupported) |
//! | `index_select`, `gather` | `select(dim, Tensor<1, Int>)`, `gather(dim, Tensor<D, Int>)` |
//! | `scatter_add`, `scatter` | `scatter(dim, Tensor<D, Int>, src, IndexingUpdateOp::Add / Assign)` |
//! | `index_add`, `index_put` | `select_assign(dim, Tensor<1, Int>, src, Add)`; `index_put` along dimension 0, `Assign` or (accumulate) `Add` |
//! | `bce_with_logits` | `nn::loss::BinaryCrossEntropyLoss` with `logits: true` (integer targets) |
//! | `cross_entropy` mean | `nn::loss::CrossEntropyLoss` (`logits: true`, no weights, padding or smoothing) |
//! | `cross_entropy` sum / none | unsupported: `CrossEntropyLoss::forward` only takes the mean |
//! | `nll` | unsupported: burn has no NLL loss over log-probabilities |
//! | `mse` mean / sum / none | `nn::loss::MseLoss::forward(a, b, Reduction::Mean / Sum)` / `forward_no_reduction` |
//! | loss `sum`, `sum_squares`, `weighted_sum` | `sum()`, `(t·t).sum()`, `(t·w).sum()` |
//! | optimizer `sgd` | `SgdConfig` with `MomentumConfig { momentum, dampening, nesterov }` when momentum ≠ 0 and `WeightDecayConfig { penalty }` when λ ≠ 0; `momentum_buffer` = the record's `momentum.velocity` |
//! | optimizer `adam`, `adamw` | `AdamConfig` (L2 decay as `WeightDecayConfig`), `AdamWConfig`; `exp_avg`/`exp_avg_sq` = the record's `moment_1`/`moment_2` |
//! | `accumulate` k | `GradientsAccumulator::accumulate` of each of the k backward passes' `GradientsParams`, then `grads()` |
//! | `micro_batches` | row m of the input: `narrow(0, m, 1)` then `squeeze_dim(0)` |
//! | `grad`: `scale`, `clip_value` | `Tensor::mul_scalar(s)`; `GradientClipping::Value(v).clip_gradient` |
//! | `grad`: `clip_norm` | composed (`GradientClipping::Norm` clips each parameter by its own norm): `square`, `sum`, `sqrt`, `Tensor::cat`, `add_scalar`, `recip`, `mul_scalar`, `clamp_max`, `mul`, as `torch.nn.utils.clip_grad_norm_` computes it |
//! | `grad`: `replace` | `GradientsParams::register` of the values |
//! | dtype `f16`, `bf16` | unsupported: burn's ndarray backend has no f16/bf16 tensors (Flex has; these probes do not drive them) |
//!
//! Whatever burn does is an outcome, never a failure of the run: burn checks shapes and
//! arguments by panicking, and a panic (or an error it returns) becomes `framework-error` with
//! its message for every quantity not yet known; a gradient burn does not give is
//! `missing-gradient`; an op, rank or argument burn's API does not offer makes every quantity
//! of the case `unsupported`, with the reason. burn has no rank-0 tensors, so a scalar (the
//! loss, a full reduction, `bce_with_logits`) has shape `[1]`. Only a malformed spec, a
//! device other than the CPU or a failing sink ends the run with an error.

use std::io::Write;

use anyhow::Result;
use parity_common::frames::{meta, FrameWriter};
use parity_common::probe_spec::{result_meta, ProbeBatch, ProbeSpec, Status};
use parity_common::spec::{DeviceKind, FloatType};

use crate::device;
#[cfg(doc)]
use crate::optim::Stepper;

#[macro_use]
pub mod dyn_tensor;
mod args;
mod case;
mod grads;
mod leaves;
mod ops;
mod outcome;
mod reduce;
#[cfg(test)]
mod tests;

pub use case::run_case;
pub use dyn_tensor::{Dyn, DynInt, Value, RANKS};
pub use leaves::Leaves;
pub use outcome::Outcome;

/// The float type the batch opens burn's device in: the first probe's that has one
/// (burn takes a device's settings once per process), float32 when every probe is half
/// precision (nothing is created on the device then).
fn batch_float_type(batch: &ProbeBatch) -> FloatType {
    batch
        .probes
        .iter()
        .find_map(|p| p.dtype.float_type())
        .unwrap_or(FloatType::F32)
}

/// Runs every probe of `batch` and writes its frames to `sink`: a header (as a training
/// run's, without the optimizer), then per probe in order, per case, per quantity one
/// `result` frame (metadata [`result_meta`]; with status `ok` one tensor `values` with burn's
/// shape, in the run dtype, float64 for an integer quantity), and an `end` frame.
///
/// A probe in another float type than the first one's cannot run in the same process (burn
/// takes the device's float type once): its quantities are `unsupported`, with that reason.
///
/// # Errors
/// A device other than the CPU (see [`device::open`]), a spec that cannot run, or a failing
/// sink.
pub fn run<W: Write>(batch: &ProbeBatch, sink: W) -> Result<()> {
    if let Some(p) = batch.probes.iter().find(|p| p.device != DeviceKind::Cpu) {
        device::open(p.device, FloatType::F32)?;
    }
    let ty = batch_float_type(batch);
    let dev = device::open(DeviceKind::Cpu, ty)?;
    let mut out = FrameWriter::new(sink);
    out.write_meta(crate::train::header_meta(&dev))?;
    for spec in &batch.probes {
        write_probe(&mut out, spec, ty, &dev)?;
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    out.finish()
}

fn write_probe<W: Write>(
    out: &mut FrameWriter<W>,
    spec: &ProbeSpec,
    ty: FloatType,
    dev: &burn::tensor::Device,
) -> Result<()> {
    for case in &spec.cases {
        let outcomes = match spec.dtype.float_type() {
            Some(t) if t != ty => case::all_unsupported(
                case,
                &format!(
                    "dtype {}: burn's {} device takes its float type once per process, \
                     and this batch runs {}",
                    t.name(),
                    crate::BURN_BACKEND,
                    ty.name()
                ),
            )?,
            _ => run_case(spec, case, dev)?,
        };
        for (q, outcome) in case.compare.iter().zip(outcomes) {
            let (status, message) = outcome.status();
            let message = message.to_string();
            let tensor = match outcome {
                Outcome::Ok { values, shape } => {
                    let mut raw = values.into_raw();
                    raw.shape = shape;
                    Some(raw)
                }
                _ => None,
            };
            eprintln!(
                "{} {} {q}: {} {message}",
                spec.probe,
                case.name,
                status.name()
            );
            debug_assert_eq!(tensor.is_some(), status == Status::Ok);
            let tensors: Vec<_> = tensor
                .map(|t| ("values".to_string(), t))
                .into_iter()
                .collect();
            out.write(
                result_meta(&spec.probe, &case.name, q, status, &message),
                tensors,
            )?;
        }
    }
    Ok(())
}
