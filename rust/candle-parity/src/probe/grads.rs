//! Gradient accumulation and the gradient transforms of a probe case, as a candle user writes
//! them: candle has no `.grad` that accumulates, so the `GradStore` of each backward pass is
//! added into the first with candle's own `GradStore::extend` (an entry already there
//! becomes `acc + new`); candle has no gradient clipping, so `clip_norm` and `clip_value`
//! are composed from tensor ops, each mirroring the PyTorch function the probe language
//! names (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`).

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};
use parity_common::probe_spec::{GradTransform, MicroBatch};

use super::outcome::Step;

/// The ε PyTorch's `clip_grad_norm_` adds to the total norm (torch/nn/utils/clip_grad.py,
/// `_clip_grads_with_norm_`: `max_norm / (total_norm + 1e-6)`).
const CLIP_NORM_EPS: f64 = 1e-6;

/// Adds the gradients of one backward pass, `more`, into `acc` (`None` before the first
/// pass of an optimizer step): `GradStore::extend`, which sums an entry both hold
/// (`acc + more`, detached) and takes any other as it is.
///
/// # Errors
/// candle's error when two gradients cannot be added.
pub(super) fn accumulate(acc: &mut Option<GradStore>, more: GradStore) -> Step<()> {
    match acc {
        None => *acc = Some(more),
        Some(a) => a.extend(more)?,
    }
    Ok(())
}

/// Row `m` of `stacked` (`narrow(0, m, 1)` then `squeeze(0)`, a view): the tensor a
/// micro-batch name holds at micro-step `m` (see [`MicroBatch`]).
///
/// # Errors
/// candle's error for a row beyond the input (the spec checks the row count).
pub(super) fn micro_row(stacked: &Tensor, m: usize) -> Step<Tensor> {
    Ok(stacked.narrow(0, m, 1)?.squeeze(0)?)
}

/// The names of `micro` bound to row `m` of their inputs, looked up in `consts`.
pub(super) fn micro_rows(
    micro: &[MicroBatch],
    consts: &std::collections::HashMap<String, Tensor>,
    m: usize,
) -> Step<Vec<(String, Tensor)>> {
    micro
        .iter()
        .map(|b| {
            let t = consts.get(&b.input).ok_or_else(|| {
                super::outcome::Fault::Spec(anyhow::anyhow!("{:?} is not an input", b.input))
            })?;
            Ok((b.name.clone(), micro_row(t, m)?))
        })
        .collect()
}

/// Applies `transforms` in order to the gradients `grads` holds for `vars` (a `Var` without
/// a gradient is left out, as PyTorch's clipping functions leave a `None` gradient):
///
/// * `scale`: `Tensor::affine(factor, 0)`;
/// * `clip_norm`: per gradient `sqr`, `sum_all`, `sqrt`; the norms `Tensor::stack`ed and
///   their norm taken the same way (PyTorch's norm of the per-tensor norms); the coefficient
///   `min((N + 1e-6)⁻¹·max_norm, 1)` by `affine(1, 1e-6)`, `recip`, `affine(max_norm, 0)`,
///   `minimum(1)` (PyTorch computes `max_norm / t` as `t.reciprocal() * max_norm`); every
///   gradient `broadcast_mul` by it;
/// * `clip_value`: `Tensor::clamp(−v, v)`;
/// * `replace`: `GradStore::insert` of the values, rounded once from float64 to the
///   `Var`'s dtype, on its device.
///
/// # Errors
/// candle's errors; a [`super::outcome::Fault::Spec`] for a replaced name that is no `Var`.
pub(super) fn transform(
    grads: &mut GradStore,
    vars: &[(String, Var)],
    transforms: &[GradTransform],
) -> Step<()> {
    for t in transforms {
        match t {
            GradTransform::Scale { factor } => each(grads, vars, |g| g.affine(*factor, 0.0))?,
            GradTransform::ClipValue { clip_value } => {
                each(grads, vars, |g| g.clamp(-*clip_value, *clip_value))?
            }
            GradTransform::ClipNorm { max_norm } => {
                let mut norms = Vec::new();
                for (_, v) in vars {
                    if let Some(g) = grads.get(v.as_tensor()) {
                        norms.push(g.sqr()?.sum_all()?.sqrt()?);
                    }
                }
                if norms.is_empty() {
                    continue;
                }
                let total = Tensor::stack(&norms, 0)?.sqr()?.sum_all()?.sqrt()?;
                let coef = total
                    .affine(1.0, CLIP_NORM_EPS)?
                    .recip()?
                    .affine(*max_norm, 0.0)?
                    .minimum(1.0)?;
                each(grads, vars, |g| g.broadcast_mul(&coef))?;
            }
            GradTransform::Replace { input, values } => {
                let (_, v) = vars.iter().find(|(n, _)| n == input).ok_or_else(|| {
                    super::outcome::Fault::Spec(anyhow::anyhow!("{input:?} is no Var"))
                })?;
                let t = v.as_tensor();
                let host = Tensor::from_vec(values.clone(), t.dims(), &Device::Cpu)?;
                let g = host.to_dtype(t.dtype())?.to_device(t.device())?;
                grads.insert(t, g);
            }
        }
    }
    Ok(())
}

/// Replaces each gradient of `vars` in `grads` by `f` of it.
fn each(
    grads: &mut GradStore,
    vars: &[(String, Var)],
    f: impl Fn(&Tensor) -> candle_core::Result<Tensor>,
) -> Step<()> {
    for (_, v) in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            let new = f(g)?;
            grads.insert(v.as_tensor(), new);
        }
    }
    Ok(())
}
