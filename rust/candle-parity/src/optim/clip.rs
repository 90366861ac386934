//! Gradient clipping on a `GradStore`, as a candle porter writes PyTorch's
//! `clip_grad_norm_` and `clip_grad_value_` (docs/loop.md): candle has neither, and a
//! `GradStore` lets a port replace each gradient (`insert`) between `loss.backward()` and
//! `opt.step(&grads)`.

use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};

/// The total 2-norm of the gradients of `vars` in `grads`, computed as PyTorch's
/// `clip_grad_norm_` does (`torch.nn.utils.get_total_norm`): each gradient's 2-norm, then the
/// 2-norm of those norms. A 0-dim tensor in the gradients' dtype; None when no var has a
/// gradient.
///
/// # Errors
/// On tensor failures.
pub fn total_norm(grads: &GradStore, vars: &[Var]) -> Result<Option<Tensor>> {
    let norms = vars
        .iter()
        .filter_map(|v| grads.get(v))
        .map(|g| g.sqr()?.sum_all()?.sqrt())
        .collect::<candle_core::Result<Vec<Tensor>>>()?;
    if norms.is_empty() {
        return Ok(None);
    }
    Ok(Some(Tensor::stack(&norms, 0)?.sqr()?.sum_all()?.sqrt()?))
}

/// PyTorch's `clip_grad_norm_(params, max_norm)` on the gradients of `vars`, given their
/// total norm `norm` (0-dim, from [`total_norm`]): every gradient multiplied by the
/// coefficient min(max_norm / (`norm` + 1e-6), 1), computed in the gradients' dtype in
/// PyTorch's order (torch/nn/utils/clip_grad.py `_clip_grads_with_norm_`: `norm + 1e-6`,
/// then `Tensor.__rdiv__`, which is `reciprocal() * max_norm`, then a clamp at 1). Returns
/// the coefficient (0-dim, same dtype).
///
/// # Errors
/// On tensor failures.
pub fn clip_grad_norm(
    grads: &mut GradStore,
    vars: &[Var],
    norm: &Tensor,
    max_norm: f64,
) -> Result<Tensor> {
    let coef = ((norm + 1e-6)?.recip()? * max_norm)?.clamp(f64::NEG_INFINITY, 1.0)?;
    for v in vars {
        if let Some(g) = grads.remove(v) {
            grads.insert(v, g.broadcast_mul(&coef)?);
        }
    }
    Ok(coef)
}

/// A 0-dim tensor's value widened to f64 (exact from f16, bf16, f32 and f64).
///
/// # Errors
/// On tensor failures (a tensor with more than one element).
pub fn widened(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

/// PyTorch's `clip_grad_value_(params, value)`: each element of every gradient of `vars`
/// clamped to [−value, value].
///
/// # Errors
/// On tensor failures.
pub fn clip_grad_value(grads: &mut GradStore, vars: &[Var], value: f64) -> Result<()> {
    for v in vars {
        if let Some(g) = grads.remove(v) {
            grads.insert(v, g.clamp(-value, value)?);
        }
    }
    Ok(())
}
