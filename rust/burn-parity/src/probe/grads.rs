//! The gradient transforms of a probe case on burn's `GradientsParams` (the accumulation
//! itself is burn's `GradientsAccumulator`, in [`super::case`]): burn's own API where it
//! computes what PyTorch does (`GradientClipping::Value` for `clip_value`), composed from
//! tensor ops where it does not (`clip_norm`: burn's `GradientClipping::Norm` clips each
//! parameter by its own norm, with ε the dtype's smallest positive value, where PyTorch's
//! `clip_grad_norm_` clips every parameter by the norm of all of them, with ε 10⁻⁶).

use burn::optim::grad_clipping::GradientClipping;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use parity_common::probe_spec::GradTransform;
use parity_common::spec::FloatType;

use super::dyn_tensor::Dyn;
use super::leaves::{Leaves, Slot};
use super::outcome::Step;

/// The ε PyTorch's `clip_grad_norm_` adds to the total norm (torch/nn/utils/clip_grad.py,
/// `_clip_grads_with_norm_`: `max_norm / (total_norm + 1e-6)`).
const CLIP_NORM_EPS: f64 = 1e-6;

/// Applies `transforms` in order to the gradients `grads` holds for the parameters `params`
/// of `leaves` (in input order; one without a gradient is left out, as PyTorch's clipping
/// functions leave a `None` gradient):
///
/// * `scale`: `Tensor::mul_scalar(factor)`;
/// * `clip_value`: `GradientClipping::Value(v).clip_gradient` (burn holds v as `f32`);
/// * `clip_norm`: per gradient `square`, `sum`, `sqrt`; the norms `Tensor::cat`ed and their
///   norm taken the same way; the coefficient `min((N + 1e-6)⁻¹·max_norm, 1)` by
///   `add_scalar`, `recip`, `mul_scalar`, `clamp_max` (PyTorch computes `max_norm / t` as
///   `t.reciprocal() * max_norm`); every gradient multiplied by it (`unsqueeze`d);
/// * `replace`: `GradientsParams::register` of the values, rounded once from float64 to
///   the run dtype `ty` on `dev`, without autodiff (`Tensor::inner`, as burn's own
///   gradients are).
///
/// # Errors
/// What burn refuses (a panic is caught by the caller); a spec error for a replaced name
/// that is not a parameter.
pub(super) fn transform(
    grads: &mut GradientsParams,
    leaves: &Leaves,
    params: &[(String, Slot)],
    transforms: &[GradTransform],
    ty: FloatType,
    dev: &Device,
) -> Step<()> {
    for t in transforms {
        match t {
            GradTransform::Scale { factor } => each(
                grads,
                leaves,
                params,
                |g| each_rank!(g, x => x.mul_scalar(*factor).into()),
            ),
            GradTransform::ClipValue { clip_value } => {
                let clip = GradientClipping::Value(*clip_value as f32);
                each(
                    grads,
                    leaves,
                    params,
                    |g| each_rank!(g, x => clip.clip_gradient(x).into()),
                )
            }
            GradTransform::ClipNorm { max_norm } => {
                let norms: Vec<Tensor<1>> = params
                    .iter()
                    .filter_map(|(_, s)| leaves.grad_in(*s, grads))
                    .map(|g| each_rank!(g, x => x.square().sum().sqrt()))
                    .collect();
                if norms.is_empty() {
                    continue;
                }
                let total = Tensor::cat(norms, 0).square().sum().sqrt();
                let coef = total
                    .add_scalar(CLIP_NORM_EPS)
                    .recip()
                    .mul_scalar(*max_norm)
                    .clamp_max(1.0);
                each(
                    grads,
                    leaves,
                    params,
                    |g| each_rank!(g, x => x.mul(coef.clone().unsqueeze()).into()),
                )
            }
            GradTransform::Replace { input, values } => {
                let (_, slot) = params.iter().find(|(n, _)| n == input).ok_or_else(|| {
                    super::outcome::Fault::Spec(anyhow::anyhow!("{input:?} is not a parameter"))
                })?;
                let shape = leaves.get(*slot).dims();
                let g = Dyn::from_f64(values, &shape, ty, dev)?;
                leaves.set_grad(*slot, grads, each_rank!(g, x => x.inner().into()));
            }
        }
    }
    Ok(())
}

/// Replaces each gradient of `params` in `grads` by `f` of it.
fn each(
    grads: &mut GradientsParams,
    leaves: &Leaves,
    params: &[(String, Slot)],
    f: impl Fn(Dyn) -> Dyn,
) {
    for (_, slot) in params {
        if let Some(g) = leaves.grad_in(*slot, grads) {
            leaves.set_grad(*slot, grads, f(g));
        }
    }
}
