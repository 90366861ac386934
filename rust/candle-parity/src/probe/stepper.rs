//! The probe's optimizer: one candle_nn optimizer object for a whole case (every iteration of
//! its training loop steps the same one).

use candle_core::backprop::GradStore;
use candle_core::Var;
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW, SGD};
use parity_common::probe_spec::{ProbeOptimizer, StateSlot};

use super::outcome::{Fault, Step};

/// The candle_nn optimizer that steps a case's `Var`s.
pub(super) enum Stepper {
    /// `candle_nn::SGD` (learning rate only).
    Sgd(SGD),
    /// `candle_nn::AdamW` (also Adam without weight decay: the update is the same).
    AdamW(AdamW),
}

impl Stepper {
    /// The candle_nn optimizer for `spec` over `vars`, or [`Fault::Unsupported`] for a
    /// hyperparameter candle_nn lacks: SGD momentum, nesterov or weight decay (`SGD::new`
    /// takes a learning rate only; `dampening` has no effect without momentum and is
    /// ignored then), Adam's L2 weight decay (candle_nn has AdamW only, whose decay is
    /// decoupled; Adam with weight decay 0 runs as AdamW with weight decay 0, the same
    /// update).
    pub(super) fn new(spec: &ProbeOptimizer, vars: Vec<Var>) -> Step<Self> {
        let adamw = |lr: f64, betas: [f64; 2], eps: f64, weight_decay: f64| -> Step<Self> {
            let params = ParamsAdamW {
                lr,
                beta1: betas[0],
                beta2: betas[1],
                eps,
                weight_decay,
            };
            Ok(Stepper::AdamW(AdamW::new(vars.clone(), params)?))
        };
        match *spec {
            ProbeOptimizer::Sgd {
                lr,
                momentum,
                nesterov,
                weight_decay,
                ..
            } => {
                if momentum != 0.0 {
                    return unsupported(&format!(
                        "candle_nn::SGD takes a learning rate only: no momentum ({momentum})"
                    ));
                }
                if nesterov {
                    return unsupported("candle_nn::SGD takes a learning rate only: no nesterov");
                }
                if weight_decay != 0.0 {
                    return unsupported(&format!(
                        "candle_nn::SGD takes a learning rate only: no weight_decay ({weight_decay})"
                    ));
                }
                Ok(Stepper::Sgd(SGD::new(vars.clone(), lr)?))
            }
            ProbeOptimizer::Adam {
                lr,
                betas,
                eps,
                weight_decay,
            } => {
                if weight_decay != 0.0 {
                    return unsupported(&format!(
                        "candle_nn has AdamW only (decoupled decay): no Adam with L2 weight_decay ({weight_decay})"
                    ));
                }
                adamw(lr, betas, eps, 0.0)
            }
            ProbeOptimizer::Adamw {
                lr,
                betas,
                eps,
                weight_decay,
            } => adamw(lr, betas, eps, weight_decay),
        }
    }

    /// One step from `grads` (a `Var` without a gradient is left as it is).
    pub(super) fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        match self {
            Stepper::Sgd(o) => o.step(grads),
            Stepper::AdamW(o) => o.step(grads),
        }
    }
}

/// Why candle cannot report an optimizer state slot: `candle_nn::AdamW` keeps its moments
/// in private fields with no accessor; a momentum buffer exists only with SGD momentum, which
/// candle_nn::SGD lacks.
pub(super) fn state_unsupported(slot: StateSlot) -> String {
    match slot {
        StateSlot::ExpAvg | StateSlot::ExpAvgSq => format!(
            "candle_nn::AdamW keeps its moments private (no accessor for {})",
            slot.name()
        ),
        StateSlot::MomentumBuffer => "candle_nn::SGD has no momentum buffer".to_string(),
    }
}

fn unsupported<T>(why: &str) -> Step<T> {
    Err(Fault::Unsupported(why.to_string()))
}
