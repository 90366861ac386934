//! The candle port of `examples/own_loop/model.py` and of its training loop, written by hand
//! as a porter writes it (docs/loop.md, "Your own loop"): candle-nn's AdamW, one per
//! parameter group (candle-nn has no parameter groups), the cosine schedule with its
//! warm-up as a function of the step set with `set_learning_rate`, and `clip_grad_norm_`
//! computed on the `GradStore`.
//!
//! PyTorch: `Linear(inputs, hidden) → LayerNorm(hidden) → Tanh → Linear(hidden, outputs)`,
//! state_dict keys `0.weight`, `0.bias`, `1.weight`, `1.bias`, `3.weight`, `3.bias`.
//!
//! [`Model`] is the faithful port; [`ModelEarlySchedule`] the same port with the porter's
//! classic slip, the schedule read one step ahead (PyTorch's `scheduler.step()` called
//! before `optimizer.step()`).

use anyhow::{Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var, D};
use candle_nn::{AdamW, Linear, Module, Optimizer as _, ParamsAdamW, VarBuilder};
use parity_common::candle::{CandleModel, GradScalars, Groups, PortOptimizer, Taps};

/// The loop's hyperparameters, as `model.py` fixes them.
const LR: f64 = 1e-2;
const WEIGHT_DECAY: f64 = 0.01;
const WARMUP: u32 = 4;
const TOTAL: u32 = 30;
/// The bound of the gradient clipping (the config's `clip: {norm: 0.5}` on the PyTorch side).
const MAX_NORM: f64 = 0.5;
/// PyTorch's `LayerNorm` ε.
const LN_EPS: f64 = 1e-5;

/// The port.
pub struct Model {
    first: Linear,
    norm_weight: Tensor,
    norm_bias: Tensor,
    last: Linear,
}

/// One size from the factory's keyword arguments (the config's `kwargs`), or its default.
fn size(config: &serde_json::Value, key: &str, default: usize) -> Result<usize> {
    match config.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .with_context(|| format!("kwargs.{key} is {v}, not a size")),
    }
}

/// The learning rate of schedule index `k` (0 for the first optimizer step), as
/// transformers' `get_cosine_schedule_with_warmup` computes it: a linear warm-up from 0 over
/// `WARMUP` steps, then half a cosine to 0 at `TOTAL`.
fn cosine_with_warmup(k: u32) -> f64 {
    if k < WARMUP {
        return LR * (f64::from(k) / f64::from(WARMUP));
    }
    let progress = f64::from(k - WARMUP) / f64::from((TOTAL - WARMUP).max(1));
    LR * (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
}

impl CandleModel for Model {
    /// `config`: the factory's kwargs (`inputs`, `hidden`, `outputs`, defaults 8, 16, 4).
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let inputs = size(config, "inputs", 8)?;
        let hidden = size(config, "hidden", 16)?;
        let outputs = size(config, "outputs", 4)?;
        let norm = vb.pp("1");
        Ok(Model {
            first: candle_nn::linear(inputs, hidden, vb.pp("0"))?,
            norm_weight: norm.get(hidden, "weight")?,
            norm_bias: norm.get(hidden, "bias")?,
            last: candle_nn::linear(hidden, outputs, vb.pp("3"))?,
        })
    }

    /// `x`: `[B, inputs]` → `[B, outputs]`. The layer norm is composed of differentiable
    /// ops (candle-nn's `LayerNorm` has no backward in 0.11).
    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        let h = taps.tap("0", &self.first.forward(x)?)?;
        let mean = h.mean_keepdim(D::Minus1)?;
        let centred = h.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + LN_EPS)?.sqrt()?)?;
        let h = normed
            .broadcast_mul(&self.norm_weight)?
            .broadcast_add(&self.norm_bias)?;
        let h = taps.tap("1", &h)?;
        let h = taps.tap("2", &h.tanh()?)?;
        Ok(taps.tap("3", &self.last.forward(&h)?)?)
    }

    /// candle-nn's AdamW twice: the Linear weights with decay, then the biases and the norm's
    /// weight without (PyTorch's two parameter groups, in its order).
    fn optimizer(&self, params: &[(String, Var)]) -> Result<Option<Box<dyn PortOptimizer>>> {
        let no_decay = |n: &str| n.ends_with("bias") || n == "1.weight";
        let group = |decayed: bool| -> Vec<Var> {
            params
                .iter()
                .filter(|(n, _)| no_decay(n) != decayed)
                .map(|(_, v)| v.clone())
                .collect()
        };
        let adamw = |vars: Vec<Var>, weight_decay: f64| -> Result<Box<dyn PortOptimizer>> {
            let params = ParamsAdamW {
                lr: LR,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            };
            Ok(Box::new(AdamW::new(vars, params)?))
        };
        Ok(Some(Box::new(Groups(vec![
            adamw(group(true), WEIGHT_DECAY)?,
            adamw(group(false), 0.0)?,
        ]))))
    }

    /// Step `t`'s rate for both groups: schedule index `t − 1`, as PyTorch's scheduler,
    /// stepped after each optimizer step, gives it.
    fn learning_rates(&self, t: u32) -> Option<Vec<f64>> {
        let lr = cosine_with_warmup(t - 1);
        Some(vec![lr, lr])
    }

    /// `clip_grad_norm_(params, MAX_NORM)` on the `GradStore`: each gradient's 2-norm, the
    /// norm of those, and every gradient multiplied by min(MAX_NORM / (norm + 1e-6), 1).
    fn transform_gradients(
        &self,
        grads: &mut GradStore,
        params: &[(String, Var)],
    ) -> Result<Option<GradScalars>> {
        let mut sum = 0.0;
        for (_, v) in params {
            if let Some(g) = grads.get(v) {
                sum += g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            }
        }
        let grad_norm = sum.sqrt();
        let coef = (MAX_NORM / (grad_norm + 1e-6)).min(1.0);
        for (_, v) in params {
            if let Some(g) = grads.remove(v) {
                grads.insert(v, (g * coef)?);
            }
        }
        Ok(Some(GradScalars {
            grad_norm,
            clip_coef: Some(coef),
        }))
    }
}

/// [`Model`] with the schedule read one step ahead: step `t` runs at schedule index `t`
/// (the porter called the scheduler before the optimizer).
pub struct ModelEarlySchedule(Model);

impl CandleModel for ModelEarlySchedule {
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        Ok(Self(Model::build(config, vb)?))
    }

    fn forward(&self, x: &Tensor, taps: &mut Taps) -> Result<Tensor> {
        self.0.forward(x, taps)
    }

    fn optimizer(&self, params: &[(String, Var)]) -> Result<Option<Box<dyn PortOptimizer>>> {
        self.0.optimizer(params)
    }

    /// The slip: index `t`, not `t − 1`.
    fn learning_rates(&self, t: u32) -> Option<Vec<f64>> {
        let lr = cosine_with_warmup(t);
        Some(vec![lr, lr])
    }

    fn transform_gradients(
        &self,
        grads: &mut GradStore,
        params: &[(String, Var)],
    ) -> Result<Option<GradScalars>> {
        self.0.transform_gradients(grads, params)
    }
}
