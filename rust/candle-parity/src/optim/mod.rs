//! Optimizers: candle-nn's `SGD` and `AdamW`, and a hand-written AdamW that follows
//! candle-nn 0.11.0's `AdamW::step` operation by operation.
//!
//! The hand-written one exists for three reasons: it exposes the moments (`exp_avg`,
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
//! parity-common's); the hand-written AdamW is in `manual.rs`, the tests in `tests.rs`.

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW, SGD};
use parity_common::optim::{FrameMoments, RunOptimizer};
use parity_common::replay::{Moments, StateTensor};
use parity_common::spec::{AdamWImpl, FactorType, Fault, FloatType, Optimizer};

use crate::device::{state_tensor, to_raw};
use crate::net::Params;

mod manual;
#[cfg(test)]
mod tests;

pub use manual::{bias_correction, ManualAdamW};

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

/// The optimizer of one run.
pub enum Stepper {
    /// `candle_nn::SGD` (no momentum).
    Sgd(SGD),
    /// `candle_nn::AdamW`.
    AdamW(AdamW),
    /// [`ManualAdamW`].
    Manual(ManualAdamW),
}

/// What candle-nn 0.11.0 lacks: Adam.
const NO_ADAM: &str = "candle-nn 0.11.0 has no Adam; use AdamW with weight_decay 0 (PyTorch's Adam equals AdamW(weight_decay=0) bit for bit)";
/// What candle-parity does not run: burn's AdamW.
const NOT_BURN: &str = "implementation \"burn\" is burn's AdamW; candle-parity runs candle-nn's (\"candle\") or the hand-written copy (\"manual\")";

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

impl Stepper {
    /// Builds the optimizer named by `spec` over `vars`, with the run's `fault` (see
    /// [`ManualAdamW::new`]).
    ///
    /// # Errors
    /// When `want_moments` is set for an optimizer that does not expose them (SGD, or
    /// candle-nn's AdamW, whose moments are private), an AdamW fault is asked of an
    /// optimizer other than the manual AdamW, or for what candle-nn 0.11.0 lacks: Adam, or an
    /// AdamW implementation that is not candle's.
    pub fn new(spec: &Optimizer, vars: Vec<Var>, want_moments: bool, fault: Fault) -> Result<Self> {
        check_fault(spec, fault)?;
        Ok(match spec {
            Optimizer::Sgd { lr } => {
                if want_moments {
                    bail!("SGD keeps no moments to record");
                }
                Stepper::Sgd(SGD::new(vars, *lr)?)
            }
            Optimizer::Adamw {
                lr,
                betas,
                eps,
                weight_decay,
                implementation,
                bias_correction,
            } => {
                let params = adamw_params(*lr, *betas, *eps, *weight_decay);
                match implementation {
                    AdamWImpl::Candle => {
                        if want_moments {
                            bail!("candle-nn 0.11.0's AdamW keeps its moments private; use implementation \"manual\" to record exp_avg/exp_avg_sq");
                        }
                        Stepper::AdamW(AdamW::new(vars, params)?)
                    }
                    AdamWImpl::Manual => {
                        Stepper::Manual(ManualAdamW::new(vars, params, *bias_correction, fault)?)
                    }
                    AdamWImpl::Burn => bail!(NOT_BURN),
                }
            }
            Optimizer::Adam { .. } => bail!(NO_ADAM),
        })
    }

    /// The optimizer of a replay ([`crate::replay`]): the one `spec` names over `vars`,
    /// started from `moments` (given for AdamW, `None` for SGD) so that its next step is
    /// step `moments.steps_taken + 1`, and the `replay_note` saying how.
    ///
    /// * SGD: candle-nn's `SGD` (stateless); note `""`.
    /// * AdamW, implementation `manual`: [`ManualAdamW::from_state`] with the spec's factor
    ///   type and `fault`; note `""`.
    /// * AdamW, implementation `candle`: candle-nn's `AdamW` cannot start from given moments
    ///   (they are private), so [`ManualAdamW`] with float64 factors replays it, which equals
    ///   it bit for bit (the workflow's `manual_identity` comparison, tolerance 0); note
    ///   [`REPLAY_NOTE_CANDLE_ADAMW`].
    ///
    /// The moments' f64 values are converted to each var's dtype (exact for the float32
    /// state the workflow writes) and moved to its device.
    ///
    /// # Errors
    /// As [`Stepper::new`] for Adam, burn's AdamW and misplaced faults; moments missing for
    /// AdamW or given to SGD; moments whose count or shapes differ from the vars'.
    pub fn from_state(
        spec: &Optimizer,
        vars: Vec<Var>,
        moments: Option<&Moments>,
        fault: Fault,
    ) -> Result<(Self, &'static str)> {
        check_fault(spec, fault)?;
        match (spec, moments) {
            (Optimizer::Sgd { lr }, None) => Ok((Stepper::Sgd(SGD::new(vars, *lr)?), "")),
            (Optimizer::Sgd { .. }, Some(_)) => bail!("SGD keeps no moments to start from"),
            (Optimizer::Adam { .. }, _) => bail!(NO_ADAM),
            (
                Optimizer::Adamw {
                    implementation: AdamWImpl::Burn,
                    ..
                },
                _,
            ) => bail!(NOT_BURN),
            (Optimizer::Adamw { .. }, None) => {
                bail!("AdamW needs exp_avg and exp_avg_sq to start from")
            }
            (
                Optimizer::Adamw {
                    lr,
                    betas,
                    eps,
                    weight_decay,
                    implementation,
                    bias_correction,
                },
                Some(m),
            ) => {
                let convert = |ts: &[StateTensor]| -> Result<Vec<Tensor>> {
                    if ts.len() != vars.len() {
                        bail!("{} moment tensors for {} parameters", ts.len(), vars.len());
                    }
                    ts.iter()
                        .zip(&vars)
                        .map(|(t, v)| state_tensor(t, v.dtype(), v.device()))
                        .collect()
                };
                let (exp_avg, exp_avg_sq) = (convert(&m.exp_avg)?, convert(&m.exp_avg_sq)?);
                let (factors, note) = match implementation {
                    AdamWImpl::Candle => (FactorType::F64, REPLAY_NOTE_CANDLE_ADAMW),
                    _ => (*bias_correction, ""),
                };
                let opt = ManualAdamW::from_state(
                    vars,
                    adamw_params(*lr, *betas, *eps, *weight_decay),
                    factors,
                    fault,
                    exp_avg,
                    exp_avg_sq,
                    m.steps_taken as usize,
                )?;
                Ok((Stepper::Manual(opt), note))
            }
        }
    }

    /// `(exp_avg, exp_avg_sq)` of parameter `i` (state_dict order), where exposed.
    pub fn moments(&self, i: usize) -> Option<(&Tensor, &Tensor)> {
        match self {
            Stepper::Manual(o) => Some(o.moments(i)),
            _ => None,
        }
    }

    /// `opt.step(&grads)`: one update, in place, of every `Var` the optimizer holds that has
    /// a gradient in `grads`.
    ///
    /// # Errors
    /// On tensor failures.
    pub fn step_vars(&mut self, grads: &GradStore) -> Result<()> {
        match self {
            Stepper::Sgd(o) => o.step(grads)?,
            Stepper::AdamW(o) => o.step(grads)?,
            Stepper::Manual(o) => o.step(grads)?,
        }
        Ok(())
    }

    /// The frames' moments ([`RunOptimizer::frame_moments`]) of the kept parameters of
    /// `params`, the `Var`s this optimizer was built over, in that order (state_dict order):
    /// [`Stepper::moments`] of each, copied by [`to_raw`] (in its `Var`'s dtype, the run's).
    ///
    /// # Errors
    /// For an optimizer other than [`ManualAdamW`] (candle-nn's keep their moments private,
    /// SGD has none), or when a device copy fails.
    pub fn frame_moments_of(
        &self,
        params: &[(String, Var)],
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        let mut out = Vec::new();
        for (i, (name, _)) in params.iter().enumerate() {
            if !keep(name) {
                continue;
            }
            let (m, v) = self
                .moments(i)
                .context("moments requested but not exposed by this optimizer")?;
            out.push(FrameMoments {
                name: name.clone(),
                exp_avg: to_raw(m)?,
                exp_avg_sq: to_raw(v)?,
            });
        }
        Ok(out)
    }
}

/// candle-parity's side of the optimizer both runners drive (see [`RunOptimizer`]): the
/// optimizer holds the run's `Var`s (the ones [`Params::vars`] gave [`Stepper::new`] or
/// [`Stepper::from_state`]) and updates them in place.
impl RunOptimizer for Stepper {
    type Params = Params;

    /// `candle_nn::SGD`, `candle_nn::AdamW` or `candle_parity::optim::ManualAdamW`.
    fn name(&self) -> &'static str {
        match self {
            Stepper::Sgd(_) => "candle_nn::SGD",
            Stepper::AdamW(_) => "candle_nn::AdamW",
            Stepper::Manual(_) => "candle_parity::optim::ManualAdamW",
        }
    }

    /// `opt.step(&grads)` on the `Var`s the optimizer holds, which are `params`'; they come
    /// back updated.
    ///
    /// # Errors
    /// On tensor failures.
    fn step(&mut self, params: Params, grads: GradStore) -> Result<Params> {
        self.step_vars(&grads)?;
        Ok(params)
    }

    /// [`Stepper::moments`] of each kept parameter, copied by [`to_raw`] (the run dtype:
    /// the moments are in their `Var`'s).
    ///
    /// # Errors
    /// For an optimizer other than [`ManualAdamW`] (candle-nn's keep their moments private,
    /// SGD has none), or when a device copy fails.
    fn frame_moments(
        &self,
        params: &Params,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        self.frame_moments_of(&params.0, keep)
    }
}
