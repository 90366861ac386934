//! Optimizers: candle-nn's `SGD` and `AdamW`, a hand-written AdamW that follows candle-nn
//! 0.11.0's `AdamW::step` operation by operation ([`ManualAdamW`]), and the porter's recipes of
//! what candle-nn lacks ([`recipe`]: PyTorch's SGD with momentum and weight decay, its Adam
//! and AdamW with amsgrad); one optimizer per parameter group, as a porter builds groups in
//! candle ([`Stepper`]); clipping on the `GradStore` ([`clip`]).
//!
//! The hand-written AdamW exists for three reasons: it exposes the moments (`exp_avg`,
//! `exp_avg_sq`) for recording, which candle-nn keeps private; it can start from given
//! moments ([`ManualAdamW::from_state`]), which replaying a step needs ([`crate::replay`],
//! [`Stepper::from_state`]); and it can compute the bias-correction factors in float32 (the
//! study's ablation, the way burn computes them). With float64 factors it must equal
//! `candle_nn::AdamW` bit for bit; the workflow checks that as its own comparison, and the
//! replay of a candle-nn AdamW run rests on it. It is also where the AdamW faults of the
//! detection-power suite live ([`Fault::in_adamw`]); without a fault it runs the same
//! expression tree.
//!
//! [`Stepper`], the optimizer of one run or replayed step, is candle-parity's side of
//! parity-common's [`RunOptimizer`] (the update and the moments; what a step records is
//! parity-common's); the tests are in `tests.rs`.

use anyhow::{bail, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW, SGD};
use parity_common::spec::{AdamWImpl, Fault, Optimizer};

pub mod clip;
mod manual;
pub mod recipe;
mod stepper;
#[cfg(test)]
mod tests;

pub use manual::{bias_correction, ManualAdamW};
use recipe::{AdamRecipe, ParamsAdam, ParamsSgd, SgdRecipe};
pub use stepper::Stepper;

/// The `defaults` subcommand's JSON: candle-nn's `ParamsAdamW::default()`, read from the
/// library, and what its SGD takes (a learning rate and nothing else).
pub fn defaults() -> serde_json::Value {
    let d = ParamsAdamW::default();
    serde_json::json!({
        "candle_version": crate::CANDLE_VERSION,
        "AdamW": {
            "source": "candle_nn::ParamsAdamW::default()",
            "lr": d.lr, "beta1": d.beta1, "beta2": d.beta2,
            "eps": d.eps, "weight_decay": d.weight_decay,
        },
        "SGD": {
            "source": "candle_nn::SGD::new(vars, learning_rate)",
            "lr": null,
            "note": "the learning rate is a required argument; there is no momentum, dampening, nesterov or weight_decay",
        },
    })
}

/// The optimizer of one parameter group.
pub enum Opt {
    /// `candle_nn::SGD` (no momentum, no weight decay).
    Sgd(SGD),
    /// `candle_nn::AdamW`.
    AdamW(AdamW),
    /// [`ManualAdamW`].
    Manual(ManualAdamW),
    /// The porter's PyTorch SGD ([`SgdRecipe`]).
    SgdRecipe(SgdRecipe),
    /// The porter's PyTorch Adam/AdamW ([`AdamRecipe`]).
    AdamRecipe(AdamRecipe),
}

/// What candle-parity does not run: burn's Adam and AdamW.
const NOT_BURN: &str = "implementation \"burn\" is burn's Adam/AdamW; candle-parity runs candle-nn's AdamW (\"candle\"), its hand-written copy (\"manual\") or the porter's recipe (\"recipe\")";

/// The `replay_note` of a candle-nn AdamW run replayed by [`ManualAdamW`].
pub const REPLAY_NOTE_CANDLE_ADAMW: &str = "candle_nn::AdamW keeps its moments private; replayed with candle_parity::optim::ManualAdamW (float64 factors), equal to it bit for bit";

fn adamw_params(lr: f64, betas: [f64; 2], eps: f64, weight_decay: f64) -> ParamsAdamW {
    ParamsAdamW {
        lr,
        beta1: betas[0],
        beta2: betas[1],
        eps,
        weight_decay,
    }
}

/// Refuses an AdamW fault ([`Fault::in_adamw`]) for an optimizer other than the manual AdamW.
fn check_fault(spec: &Optimizer, fault: Fault) -> Result<()> {
    let manual = matches!(
        spec,
        Optimizer::Adamw {
            implementation: AdamWImpl::Manual,
            ..
        }
    );
    if fault.in_adamw() && !manual {
        bail!("fault {fault:?} needs the manual AdamW (implementation \"manual\")");
    }
    Ok(())
}

impl Opt {
    /// The optimizer `spec` names over `vars`, with the group's learning rate `lr` and
    /// weight decay `weight_decay` and the run's `fault` (see [`ManualAdamW::new`]):
    /// candle-nn's SGD for a plain SGD, the SGD recipe for one with momentum, dampening,
    /// Nesterov or weight decay; the Adam recipe for Adam and for an AdamW with
    /// `implementation: recipe` (which amsgrad needs); candle-nn's or the manual AdamW.
    ///
    /// # Errors
    /// When `want_moments` is set for an optimizer that does not expose them (SGD, or
    /// candle-nn's AdamW, whose moments are private), an AdamW fault is asked of an
    /// optimizer other than the manual AdamW, amsgrad of an AdamW other than the recipe, or
    /// burn's implementation.
    pub fn new(
        spec: &Optimizer,
        lr: f64,
        weight_decay: f64,
        vars: Vec<Var>,
        want_moments: bool,
        fault: Fault,
    ) -> Result<Self> {
        check_fault(spec, fault)?;
        Ok(match *spec {
            Optimizer::Sgd {
                momentum,
                dampening,
                nesterov,
                ..
            } => {
                if want_moments {
                    bail!("SGD keeps no moments to record");
                }
                let plain = momentum == 0.0 && dampening == 0.0 && !nesterov && weight_decay == 0.0;
                if plain {
                    Opt::Sgd(SGD::new(vars, lr)?)
                } else {
                    Opt::SgdRecipe(SgdRecipe::new(
                        vars,
                        ParamsSgd {
                            lr,
                            momentum,
                            dampening,
                            nesterov,
                            weight_decay,
                        },
                    )?)
                }
            }
            Optimizer::Adamw {
                betas,
                eps,
                amsgrad,
                implementation,
                bias_correction,
                ..
            } => {
                let params = adamw_params(lr, betas, eps, weight_decay);
                match implementation {
                    AdamWImpl::Candle | AdamWImpl::Manual if amsgrad => {
                        bail!("candle-nn's AdamW has no amsgrad; the recipe (implementation \"recipe\") has")
                    }
                    AdamWImpl::Candle => {
                        if want_moments {
                            bail!("candle-nn 0.11.0's AdamW keeps its moments private; use implementation \"manual\" to record exp_avg/exp_avg_sq");
                        }
                        Opt::AdamW(AdamW::new(vars, params)?)
                    }
                    AdamWImpl::Manual => {
                        Opt::Manual(ManualAdamW::new(vars, params, bias_correction, fault)?)
                    }
                    AdamWImpl::Recipe => Opt::AdamRecipe(AdamRecipe::new(
                        vars,
                        recipe_params(lr, betas, eps, weight_decay, true, amsgrad),
                    )?),
                    AdamWImpl::Burn => bail!(NOT_BURN),
                }
            }
            Optimizer::Adam {
                betas,
                eps,
                amsgrad,
                implementation,
                ..
            } => match implementation {
                AdamWImpl::Recipe => Opt::AdamRecipe(AdamRecipe::new(
                    vars,
                    recipe_params(lr, betas, eps, weight_decay, false, amsgrad),
                )?),
                AdamWImpl::Burn => bail!(NOT_BURN),
                other => bail!("candle-nn 0.11.0 has no Adam; implementation {other:?} is an AdamW's: an Adam is the recipe"),
            },
        })
    }

    /// candle's type that steps, the header's `optimizer_impl`.
    pub fn name(&self) -> &'static str {
        match self {
            Opt::Sgd(_) => "candle_nn::SGD",
            Opt::AdamW(_) => "candle_nn::AdamW",
            Opt::Manual(_) => "candle_parity::optim::ManualAdamW",
            Opt::SgdRecipe(_) => "candle_parity::optim::recipe::SgdRecipe",
            Opt::AdamRecipe(_) => "candle_parity::optim::recipe::AdamRecipe",
        }
    }

    /// The learning rate (`opt.learning_rate()`).
    pub fn learning_rate(&self) -> f64 {
        match self {
            Opt::Sgd(o) => o.learning_rate(),
            Opt::AdamW(o) => o.learning_rate(),
            Opt::Manual(o) => o.learning_rate(),
            Opt::SgdRecipe(o) => o.learning_rate(),
            Opt::AdamRecipe(o) => o.learning_rate(),
        }
    }

    /// Sets the learning rate (`set_learning_rate`, what a porter's scheduler calls).
    pub fn set_learning_rate(&mut self, lr: f64) {
        match self {
            Opt::Sgd(o) => o.set_learning_rate(lr),
            Opt::AdamW(o) => o.set_learning_rate(lr),
            Opt::Manual(o) => o.set_learning_rate(lr),
            Opt::SgdRecipe(o) => o.set_learning_rate(lr),
            Opt::AdamRecipe(o) => o.set_learning_rate(lr),
        }
    }

    /// Sets the momentum (SGD) or β₁ (Adam, AdamW), as OneCycleLR cycles them.
    ///
    /// # Errors
    /// For candle-nn's SGD, which has no momentum ([`Opt::with_momentum`] first).
    pub fn set_momentum(&mut self, momentum: f64) -> Result<()> {
        match self {
            Opt::Sgd(_) => bail!("candle-nn's SGD has no momentum to cycle"),
            Opt::AdamW(o) => {
                let mut p = o.params().clone();
                p.beta1 = momentum;
                o.set_params(p);
            }
            Opt::Manual(o) => o.set_beta1(momentum),
            Opt::SgdRecipe(o) => o.set_momentum(momentum),
            Opt::AdamRecipe(o) => o.set_beta1(momentum),
        }
        Ok(())
    }

    /// The optimizer with a momentum to set: candle-nn's SGD, which has none, becomes the
    /// SGD recipe with momentum 0 (the same update until a momentum is set, as PyTorch's SGD
    /// with momentum 0 is); every other one is returned as it is. For a OneCycleLR that
    /// cycles the momentum.
    ///
    /// # Errors
    /// On tensor failures.
    pub fn with_momentum(self) -> Result<Self> {
        Ok(match self {
            Opt::Sgd(o) => {
                let lr = o.learning_rate();
                Opt::SgdRecipe(SgdRecipe::new(
                    o.into_inner(),
                    ParamsSgd {
                        lr,
                        momentum: 0.0,
                        dampening: 0.0,
                        nesterov: false,
                        weight_decay: 0.0,
                    },
                )?)
            }
            other => other,
        })
    }

    /// `opt.step(&grads)`: one update, in place, of every `Var` the optimizer holds that has
    /// a gradient in `grads`.
    ///
    /// # Errors
    /// On tensor failures.
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        match self {
            Opt::Sgd(o) => o.step(grads)?,
            Opt::AdamW(o) => o.step(grads)?,
            Opt::Manual(o) => o.step(grads)?,
            Opt::SgdRecipe(o) => o.step(grads)?,
            Opt::AdamRecipe(o) => o.step(grads)?,
        }
        Ok(())
    }

    /// `(exp_avg, exp_avg_sq)` of var `i` of the group, where exposed.
    pub fn moments(&self, i: usize) -> Option<(&Tensor, &Tensor)> {
        match self {
            Opt::Manual(o) => Some(o.moments(i)),
            Opt::AdamRecipe(o) => Some(o.moments(i)),
            _ => None,
        }
    }
}

fn recipe_params(
    lr: f64,
    betas: [f64; 2],
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
    amsgrad: bool,
) -> ParamsAdam {
    ParamsAdam {
        lr,
        beta1: betas[0],
        beta2: betas[1],
        eps,
        weight_decay,
        decoupled,
        amsgrad,
    }
}
