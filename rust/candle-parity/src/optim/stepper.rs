//! [`Stepper`], the optimizer of one run or replayed step: one [`Opt`] per parameter group,
//! as a porter builds groups in candle; candle-parity's side of parity-common's
//! [`RunOptimizer`] (the update and the moments; what a step records is parity-common's).

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::Tensor;
use parity_common::candle::PortOptimizer;
use parity_common::optim::{FrameMoments, RunOptimizer};
use parity_common::replay::{Moments, StateTensor};
use parity_common::spec::{AdamWImpl, FactorType, FloatType, Optimizer, RunSpec};

use super::recipe::AdamRecipe;
use super::{
    adamw_params, check_fault, recipe_params, ManualAdamW, Opt, NOT_BURN, REPLAY_NOTE_CANDLE_ADAMW,
};
use crate::device::{state_tensor, to_raw};
use crate::net::Params;

/// The optimizer of one run: one [`Opt`] per parameter group (a run without groups has one
/// over every parameter), each over its group's `Var`s.
pub struct Stepper {
    /// Per group: the indices of its parameters in the run's (state_dict) order, and its
    /// optimizer.
    groups: Vec<(Vec<usize>, Opt)>,
    /// A port's own optimizer ([`CandleModel::optimizer`]), which then steps instead.
    ///
    /// [`CandleModel::optimizer`]: parity_common::candle::CandleModel::optimizer
    port: Option<Box<dyn PortOptimizer>>,
}

/// The indices (state_dict order of `params`) of each group of `spec`.
fn group_indices(spec: &RunSpec, params: &Params) -> Result<Vec<(Vec<usize>, f64, f64)>> {
    spec.groups()
        .into_iter()
        .map(|g| {
            let idx = g
                .params
                .iter()
                .map(|n| {
                    params
                        .0
                        .iter()
                        .position(|(p, _)| p == n)
                        .with_context(|| format!("group parameter {n:?} is not the model's"))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((idx, g.lr, g.weight_decay))
        })
        .collect()
}

impl Stepper {
    /// The optimizers of `spec`'s groups ([`RunSpec::groups`]) over `params`' `Var`s
    /// ([`Opt::new`]; `want_moments`: the spec's `record.moments`).
    ///
    /// # Errors
    /// As [`Opt::new`], or a group naming a parameter the model does not have.
    pub fn new(spec: &RunSpec, params: &Params, want_moments: bool) -> Result<Self> {
        let cycled = spec
            .training_loop
            .as_ref()
            .and_then(|l| l.schedule.as_ref())
            .is_some_and(|s| s.kind.cycles_momentum());
        let groups = group_indices(spec, params)?
            .into_iter()
            .map(|(idx, lr, wd)| {
                let vars = idx.iter().map(|&i| params.0[i].1.clone()).collect();
                let opt = Opt::new(&spec.optimizer, lr, wd, vars, want_moments, spec.fault)?;
                Ok((idx, if cycled { opt.with_momentum()? } else { opt }))
            })
            .collect::<Result<_>>()?;
        Ok(Self { groups, port: None })
    }

    /// A port's own optimizer (docs/loop.md, "Your own loop"), which holds the port's `Var`s
    /// and steps them; its groups are its own.
    pub fn of_port(port: Box<dyn PortOptimizer>) -> Self {
        Self {
            groups: Vec::new(),
            port: Some(port),
        }
    }

    /// The optimizer of a replay ([`crate::replay`]): the one `spec` names over `params`,
    /// started from `moments` (given for Adam and AdamW, `None` for SGD) so that its next
    /// step is step `moments.steps_taken + 1`, and the `replay_note` saying how.
    ///
    /// * SGD without momentum: candle-nn's `SGD` (stateless); note `""`.
    /// * AdamW, implementation `manual`: [`ManualAdamW::from_state`] with the spec's factor
    ///   type and `fault`; note `""`.
    /// * AdamW, implementation `candle`: candle-nn's `AdamW` cannot start from given moments
    ///   (they are private), so [`ManualAdamW`] with float64 factors replays it, which equals
    ///   it bit for bit (the workflow's `manual_identity` comparison, tolerance 0); note
    ///   [`REPLAY_NOTE_CANDLE_ADAMW`].
    /// * Adam and AdamW recipes without amsgrad: [`AdamRecipe::from_state`], every parameter
    ///   at step count `steps_taken`; note `""`.
    ///
    /// The moments' f64 values are converted to each var's dtype (exact for the float32
    /// state the workflow writes) and moved to its device.
    ///
    /// # Errors
    /// As [`Stepper::new`] for burn's and misplaced faults; a run with a training loop
    /// ([`RunSpec::training_loop`]: its schedule, groups, clipping or momentum buffers are
    /// not in a replay's state); an SGD with momentum (its buffers are not either); moments
    /// missing for Adam and AdamW or given to SGD; moments whose count or shapes differ from
    /// the vars'.
    pub fn from_state(
        spec: &RunSpec,
        params: &Params,
        moments: Option<&Moments>,
    ) -> Result<(Self, &'static str)> {
        if spec.training_loop.is_some() {
            bail!("a replay starts from parameters and Adam's moments only; a run with a training loop (schedule, clipping, parameter groups, accumulation) cannot be replayed yet");
        }
        let optimizer = &spec.optimizer;
        check_fault(optimizer, spec.fault)?;
        let vars = params.vars();
        let (lr, wd) = (optimizer.lr(), optimizer.weight_decay());
        let all: Vec<usize> = (0..vars.len()).collect();
        let convert = |ts: &[StateTensor]| -> Result<Vec<Tensor>> {
            if ts.len() != vars.len() {
                bail!("{} moment tensors for {} parameters", ts.len(), vars.len());
            }
            ts.iter()
                .zip(&vars)
                .map(|(t, v)| state_tensor(t, v.dtype(), v.device()))
                .collect()
        };
        let (opt, note) = match (optimizer, moments) {
            (Optimizer::Sgd { momentum, .. }, _) if *momentum != 0.0 => {
                bail!("an SGD with momentum cannot be replayed from parameters alone (its momentum buffers are not in the state)")
            }
            (Optimizer::Sgd { .. }, None) => {
                (Opt::new(optimizer, lr, wd, vars, false, spec.fault)?, "")
            }
            (Optimizer::Sgd { .. }, Some(_)) => bail!("SGD keeps no moments to start from"),
            (
                Optimizer::Adamw {
                    implementation: AdamWImpl::Burn,
                    ..
                }
                | Optimizer::Adam {
                    implementation: AdamWImpl::Burn,
                    ..
                },
                _,
            ) => bail!(NOT_BURN),
            (Optimizer::Adamw { .. } | Optimizer::Adam { .. }, None) => {
                bail!("an Adam or AdamW needs exp_avg and exp_avg_sq to start from")
            }
            (
                Optimizer::Adamw {
                    betas,
                    eps,
                    amsgrad,
                    implementation: AdamWImpl::Recipe,
                    ..
                },
                Some(m),
            )
            | (
                Optimizer::Adam {
                    betas,
                    eps,
                    amsgrad,
                    implementation: AdamWImpl::Recipe,
                    ..
                },
                Some(m),
            ) => {
                let decoupled = matches!(optimizer, Optimizer::Adamw { .. });
                let p = recipe_params(lr, *betas, *eps, wd, decoupled, *amsgrad);
                let opt = AdamRecipe::from_state(
                    vars.clone(),
                    p,
                    convert(&m.exp_avg)?,
                    convert(&m.exp_avg_sq)?,
                    u64::from(m.steps_taken),
                )?;
                (Opt::AdamRecipe(opt), "")
            }
            (
                Optimizer::Adamw {
                    betas,
                    eps,
                    implementation,
                    bias_correction,
                    ..
                },
                Some(m),
            ) => {
                let (factors, note) = match implementation {
                    AdamWImpl::Candle => (FactorType::F64, REPLAY_NOTE_CANDLE_ADAMW),
                    _ => (*bias_correction, ""),
                };
                let opt = ManualAdamW::from_state(
                    vars.clone(),
                    adamw_params(lr, *betas, *eps, wd),
                    factors,
                    spec.fault,
                    convert(&m.exp_avg)?,
                    convert(&m.exp_avg_sq)?,
                    m.steps_taken as usize,
                )?;
                (Opt::Manual(opt), note)
            }
            (Optimizer::Adam { implementation, .. }, Some(_)) => bail!(
                "candle-nn 0.11.0 has no Adam; implementation {implementation:?} is an AdamW's: an Adam is the recipe"
            ),
        };
        Ok((
            Self {
                groups: vec![(all, opt)],
                port: None,
            },
            note,
        ))
    }

    /// Sets each group's learning rate (`lrs`, group order): `opt.set_learning_rate(lr)`.
    pub fn set_learning_rates(&mut self, lrs: &[f64]) {
        if let Some(p) = &mut self.port {
            p.set_learning_rates(lrs);
        }
        for ((_, opt), &lr) in self.groups.iter_mut().zip(lrs) {
            opt.set_learning_rate(lr);
        }
    }

    /// Sets each group's momentum or β₁ (`momenta`, group order).
    ///
    /// # Errors
    /// As [`Opt::set_momentum`]; a port's own optimizer, whose momentum the workflow cannot
    /// reach.
    pub fn set_momenta(&mut self, momenta: &[f64]) -> Result<()> {
        if self.port.is_some() {
            bail!("a port's own optimizer has no momentum the workflow can set: its OneCycleLR momentum cycling is the port's to write");
        }
        for ((_, opt), &m) in self.groups.iter_mut().zip(momenta) {
            opt.set_momentum(m)?;
        }
        Ok(())
    }

    /// Each group's learning rate now.
    pub fn learning_rates(&self) -> Vec<f64> {
        if let Some(p) = &self.port {
            return p.learning_rates();
        }
        self.groups.iter().map(|(_, o)| o.learning_rate()).collect()
    }

    /// `(exp_avg, exp_avg_sq)` of parameter `i` (state_dict order), where exposed.
    pub fn moments(&self, i: usize) -> Option<(&Tensor, &Tensor)> {
        self.groups.iter().find_map(|(idx, opt)| {
            idx.iter()
                .position(|&j| j == i)
                .and_then(|local| opt.moments(local))
        })
    }

    /// `opt.step(&grads)` of every group.
    ///
    /// # Errors
    /// On tensor failures.
    pub fn step_vars(&mut self, grads: &GradStore) -> Result<()> {
        if let Some(p) = &mut self.port {
            p.step(grads)?;
        }
        for (_, opt) in &mut self.groups {
            opt.step(grads)?;
        }
        Ok(())
    }
}

/// candle-parity's side of the optimizer both runners drive (see [`RunOptimizer`]): the
/// optimizers hold the run's `Var`s (the ones [`Params::vars`] gave [`Stepper::new`] or
/// [`Stepper::from_state`]) and update them in place.
impl RunOptimizer for Stepper {
    type Params = Params;

    /// The optimizer's type (every group's is the same kind).
    fn name(&self) -> &'static str {
        match &self.port {
            Some(p) => p.name(),
            None => self.groups[0].1.name(),
        }
    }

    /// `opt.step(&grads)` on the `Var`s the optimizers hold, which are `params`'; they come
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
    /// For an optimizer that does not expose them (candle-nn's keep their moments private,
    /// SGD has none), or when a device copy fails.
    fn frame_moments(
        &self,
        params: &Params,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        let mut out = Vec::new();
        for (i, (name, _)) in params.0.iter().enumerate() {
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
