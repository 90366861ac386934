//! The candle port of `examples/own_loop/model.py` and of its training loop, written by hand
//! as a porter writes it (docs/loop.md, "Your own loop"): candle-nn's AdamW, one per
//! parameter group (candle-nn has no parameter groups), the cosine schedule with its
//! warm-up as a function of the step set with `set_learning_rate`, and `clip_grad_norm_`
//! computed on the `GradStore`.
//!
//! PyTorch: `Linear(inputs, hidden) → LayerNorm(hidden) → Tanh → Linear(hidden, outputs)`,
//! state_dict keys `0.weight`, `0.bias`, `1.weight`, `1.bias`, `3.weight`, `3.bias`.
//!
//! [`Model`] is the faithful port. Three more are the same port with one of the slips
//! porters make in a hand-written loop ([`Slip`]): [`ModelEarlySchedule`] reads its schedule
//! one step ahead, [`ModelDecayAll`] decays the group PyTorch leaves undecayed, and
//! [`ModelPerParameterClip`] clips each gradient by its own norm.

use std::marker::PhantomData;

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

/// A slip of the hand-written loop, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slip {
    /// The faithful port.
    None,
    /// Step `t` runs at schedule index `t`, not `t − 1`: the porter called the scheduler
    /// before the optimizer.
    EarlySchedule,
    /// The second group (biases, the norm's weight) decayed like the first: the porter
    /// copied the group's settings.
    DecayAll,
    /// Each gradient clipped by its own norm (burn's `GradientClipping::Norm`), not by the
    /// total norm as `clip_grad_norm_` does.
    PerParameterClip,
}

/// Which [`Slip`] a port has, as a type (the config names a port by its type).
pub trait Variant: 'static {
    /// The slip.
    const SLIP: Slip;
}

/// The port with the loop of variant `V`.
pub struct Port<V: Variant> {
    first: Linear,
    norm_weight: Tensor,
    norm_bias: Tensor,
    last: Linear,
    variant: PhantomData<V>,
}

/// The variant without a slip.
pub struct Faithful;
/// The variant of [`Slip::EarlySchedule`].
pub struct EarlySchedule;
/// The variant of [`Slip::DecayAll`].
pub struct DecayAll;
/// The variant of [`Slip::PerParameterClip`].
pub struct PerParameterClip;

impl Variant for Faithful {
    const SLIP: Slip = Slip::None;
}
impl Variant for EarlySchedule {
    const SLIP: Slip = Slip::EarlySchedule;
}
impl Variant for DecayAll {
    const SLIP: Slip = Slip::DecayAll;
}
impl Variant for PerParameterClip {
    const SLIP: Slip = Slip::PerParameterClip;
}

/// The faithful port.
pub type Model = Port<Faithful>;
/// The port whose schedule runs one step ahead.
pub type ModelEarlySchedule = Port<EarlySchedule>;
/// The port that decays the biases and the norm's weight.
pub type ModelDecayAll = Port<DecayAll>;
/// The port that clips each gradient by its own norm.
pub type ModelPerParameterClip = Port<PerParameterClip>;

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

impl<V: Variant> CandleModel for Port<V> {
    /// `config`: the factory's kwargs (`inputs`, `hidden`, `outputs`, defaults 8, 16, 4).
    fn build(config: &serde_json::Value, vb: VarBuilder) -> Result<Self> {
        let inputs = size(config, "inputs", 8)?;
        let hidden = size(config, "hidden", 16)?;
        let outputs = size(config, "outputs", 4)?;
        let norm = vb.pp("1");
        Ok(Port {
            first: candle_nn::linear(inputs, hidden, vb.pp("0"))?,
            norm_weight: norm.get(hidden, "weight")?,
            norm_bias: norm.get(hidden, "bias")?,
            last: candle_nn::linear(hidden, outputs, vb.pp("3"))?,
            variant: PhantomData,
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
    /// weight without (PyTorch's two parameter groups, in its order); with
    /// [`Slip::DecayAll`], with decay too.
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
        let bias_norm_decay = match V::SLIP {
            Slip::DecayAll => WEIGHT_DECAY,
            _ => 0.0,
        };
        Ok(Some(Box::new(Groups(vec![
            adamw(group(true), WEIGHT_DECAY)?,
            adamw(group(false), bias_norm_decay)?,
        ]))))
    }

    /// Step `t`'s rate for both groups: schedule index `t − 1`, as PyTorch's scheduler,
    /// stepped after each optimizer step, gives it (index `t` with [`Slip::EarlySchedule`]).
    fn learning_rates(&self, t: u32) -> Option<Vec<f64>> {
        let k = if V::SLIP == Slip::EarlySchedule {
            t
        } else {
            t - 1
        };
        let lr = cosine_with_warmup(k);
        Some(vec![lr, lr])
    }

    /// `clip_grad_norm_(params, MAX_NORM)` on the `GradStore`: each gradient's 2-norm, the
    /// norm of those, and every gradient multiplied by min(MAX_NORM / (norm + 1e-6), 1).
    /// With [`Slip::PerParameterClip`], each gradient multiplied by its own min(MAX_NORM /
    /// (‖g‖ + 1e-6), 1): no one coefficient, so none is reported.
    fn transform_gradients(
        &self,
        grads: &mut GradStore,
        params: &[(String, Var)],
    ) -> Result<Option<GradScalars>> {
        // each gradient's sum of squares, widened on the host
        let squares = |g: &Tensor| -> Result<f64> {
            Ok(g.sqr()?
                .sum_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?)
        };
        let mut sum = 0.0;
        for (_, v) in params {
            if let Some(g) = grads.get(v) {
                sum += squares(g)?;
            }
        }
        let grad_norm = sum.sqrt();
        let coef = |norm: f64| (MAX_NORM / (norm + 1e-6)).min(1.0);
        for (_, v) in params {
            if let Some(g) = grads.remove(v) {
                let c = match V::SLIP {
                    Slip::PerParameterClip => coef(squares(&g)?.sqrt()),
                    _ => coef(grad_norm),
                };
                grads.insert(v, (g * c)?);
            }
        }
        let clip_coef = (V::SLIP != Slip::PerParameterClip).then(|| coef(grad_norm));
        Ok(Some(GradScalars {
            grad_norm,
            clip_coef,
        }))
    }
}
