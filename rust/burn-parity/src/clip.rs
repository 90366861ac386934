//! PyTorch's `clip_grad_norm_` on burn's `GradientsParams`, as a burn porter composes it
//! (docs/loop.md): burn's `GradientClipping::Norm` clips each parameter by its own norm, so
//! the norm of all of them is computed by walking the module (`ModuleVisitor`, the rank
//! being a type parameter of `GradientsParams::get`) and every gradient is multiplied by one
//! coefficient (`GradientsParams::register`). Value clipping is burn's own
//! `GradientClipping::Value`, which is PyTorch's `clip_grad_value_`, configured on the
//! optimizer ([`crate::optim::Stepper::for_run`]).

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// The ε PyTorch's `clip_grad_norm_` adds to the total norm (torch/nn/utils/clip_grad.py,
/// `_clip_grads_with_norm_`: `max_norm / (total_norm + 1e-6)`).
const CLIP_NORM_EPS: f64 = 1e-6;

/// Each gradient's 2-norm (`square`, `sum`, `sqrt`), in the module's parameter order.
struct Norms<'a> {
    grads: &'a GradientsParams,
    norms: Vec<Tensor<1>>,
}

impl ModuleVisitor for Norms<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.norms.push(g.square().sum().sqrt());
        }
    }
}

/// Every gradient multiplied by `coef` (shape `[1]`).
struct Scale<'a> {
    grads: &'a mut GradientsParams,
    coef: Tensor<1>,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.remove::<D>(param.id) {
            let scaled = g.mul(self.coef.clone().unsqueeze::<D>());
            self.grads.register::<D>(param.id, scaled);
        }
    }
}

/// The total 2-norm of the gradients `grads` holds for `module`'s parameters, as
/// `clip_grad_norm_` computes it (`torch.nn.utils.get_total_norm`: each gradient's norm,
/// then the norm of those): shape `[1]`, in the gradients' dtype, on their device; `None`
/// when no parameter has a gradient.
pub fn total_norm<M: Module>(module: &M, grads: &GradientsParams) -> Option<Tensor<1>> {
    let mut v = Norms {
        grads,
        norms: Vec::new(),
    };
    module.visit(&mut v);
    if v.norms.is_empty() {
        return None;
    }
    Some(Tensor::cat(v.norms, 0).square().sum().sqrt())
}

/// PyTorch's `clip_grad_norm_(params, max_norm)` given the total norm `norm` ([`total_norm`]):
/// the coefficient min(max_norm / (`norm` + 1e-6), 1) in PyTorch's order (`norm + 1e-6`, then
/// `reciprocal() * max_norm`, as `Tensor.__rdiv__` computes a float over a tensor, then a
/// clamp at 1), every gradient of `module`'s parameters multiplied by it. Returns it (shape
/// `[1]`).
pub fn clip_grad_norm<M: Module>(
    module: &M,
    grads: &mut GradientsParams,
    norm: &Tensor<1>,
    max_norm: f64,
) -> Tensor<1> {
    let coef = norm
        .clone()
        .add_scalar(CLIP_NORM_EPS)
        .recip()
        .mul_scalar(max_norm)
        .clamp_max(1.0);
    module.visit(&mut Scale {
        grads,
        coef: coef.clone(),
    });
    coef
}
