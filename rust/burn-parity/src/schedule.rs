//! The learning-rate schedule of a burn run (docs/loop.md), as burn's users write it: a
//! `ModuleLrScheduler` whose `step()`, called once before each optimizer step, returns the
//! learning rate of that step for every parameter group.
//!
//! burn's own schedulers where one computes PyTorch's schedule: `StepLR` is
//! `StepLrSchedulerConfig`, `ExponentialLR` `ExponentialLrSchedulerConfig`,
//! `CosineAnnealingLR` `CosineAnnealingLrSchedulerConfig`, `LinearLR(start, end, T)` on a
//! learning rate lr `LinearLrSchedulerConfig(lr·start, lr·end, T)`, and a `SequentialLR` of
//! them `SequentialLrSchedulerConfig`; one per group through
//! `ModuleLrSchedulerConfig::with_group`. They compute their values otherwise than PyTorch
//! (closed forms where PyTorch recurses on the previous value, `(lr/γ)·γ` for the first
//! exponential value): the learning rates agree to float64 rounding, which the comparison
//! of the loop's scalars admits. burn refuses an initial learning rate outside (0, 1] for the
//! linear, cosine and exponential ones (the plan refuses such a run first).
//!
//! burn has no `MultiStepLR`, `OneCycleLR` or warm-up from 0 (its linear scheduler refuses an
//! initial 0): for those a porter writes an `LrScheduler`, here [`TorchSchedule`], PyTorch's
//! schedule replayed by parity-common's [`Scheduler`]. burn's optimizers fix the momentum
//! and β₁ when they are built, so OneCycleLR's momentum cycling has no burn counterpart.

use anyhow::{anyhow, bail, Result};
use burn::module::ParamGroup;
use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::optim::lr_scheduler::exponential::ExponentialLrSchedulerConfig;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::optim::lr_scheduler::module_lr_scheduler::{ModuleLrScheduler, ModuleLrSchedulerConfig};
use burn::optim::lr_scheduler::sequential::SequentialLrSchedulerConfig;
use burn::optim::lr_scheduler::step::StepLrSchedulerConfig;
use burn::optim::lr_scheduler::{LrScheduler, LrSchedulerConfig, LrSchedulerRecord};
use burn::optim::LearningRate;
use parity_common::schedule::{Kind, Scheduler};

/// burn's own scheduler computing `kind` on a group whose learning rate is `lr`, or `None`
/// where burn has none (module docs).
pub fn builtin(kind: &Kind, lr: f64) -> Option<LrSchedulerConfig> {
    Some(match kind {
        Kind::StepLR { step_size, gamma } => StepLrSchedulerConfig::new(lr, *step_size as usize)
            .with_gamma(*gamma)
            .into(),
        Kind::ExponentialLR { gamma } => ExponentialLrSchedulerConfig::new(lr, *gamma).into(),
        Kind::CosineAnnealingLR { T_max, eta_min } => {
            CosineAnnealingLrSchedulerConfig::new(lr, *T_max as usize)
                .with_min_lr(*eta_min)
                .into()
        }
        Kind::LinearLR {
            start_factor,
            end_factor,
            total_iters,
        } => {
            LinearLrSchedulerConfig::new(lr * start_factor, lr * end_factor, *total_iters as usize)
                .into()
        }
        Kind::SequentialLR {
            schedulers,
            milestones,
        } => SequentialLrSchedulerConfig::new(
            schedulers
                .iter()
                .map(|k| builtin(k, lr))
                .collect::<Option<Vec<_>>>()?,
            milestones.iter().map(|&m| m as usize).collect(),
        )
        .into(),
        _ => return None,
    })
}

/// The learning rates of a run's parameter groups: `groups` pairs each group's parameters
/// with its learning rate, the last group (every parameter no other names) first matched by
/// `ParamGroup::all()` as burn's base; `kind` the schedule, or `None` for constant rates.
/// Returns the scheduler and which implementation it is (burn's type or
/// `hand-written LrScheduler`), for the trace's header.
///
/// # Errors
/// A schedule burn refuses (its message), OneCycleLR's momentum cycling, no group.
pub fn module_scheduler(
    kind: Option<&Kind>,
    groups: &[(ParamGroup, f64)],
) -> Result<(ModuleLrScheduler, &'static str)> {
    let ((_, base), rest) = groups
        .split_last()
        .ok_or_else(|| anyhow!("no parameter group"))?;
    let Some(kind) = kind else {
        let s = rest
            .iter()
            .fold(ModuleLrScheduler::new(*base), |s, (g, lr)| {
                s.with_group(g.clone(), *lr)
            });
        return Ok((s, "constant learning rates"));
    };
    if kind.cycles_momentum() {
        bail!("burn's optimizers fix the momentum and β₁ when built: OneCycleLR cannot cycle them (set cycle_momentum: false)");
    }
    if let Some(first) = builtin(kind, *base) {
        let mut config = ModuleLrSchedulerConfig::new(first);
        for (g, lr) in rest {
            config = config.with_group(g.clone(), builtin(kind, *lr).expect("same kind"));
        }
        let s = config
            .init()
            .map_err(|e| anyhow!("burn's scheduler refuses {kind:?}: {e}"))?;
        return Ok((s, "burn::optim::lr_scheduler"));
    }
    let s = rest.iter().fold(
        ModuleLrScheduler::new(TorchSchedule::new(kind, *base)),
        |s, (g, lr)| s.with_group(g.clone(), TorchSchedule::new(kind, *lr)),
    );
    Ok((s, "hand-written LrScheduler"))
}

/// A porter's `LrScheduler` for a schedule burn lacks: PyTorch's values for one group (the
/// scheduler's index-0 value on the first `step()`, the next index on each later one), as
/// parity-common's [`Scheduler`] computes them bit for bit.
#[derive(Clone, Debug)]
pub struct TorchSchedule {
    fresh: Scheduler,
    now: Scheduler,
    calls: u64,
}

impl TorchSchedule {
    /// `kind` on a group whose learning rate is `lr`.
    pub fn new(kind: &Kind, lr: f64) -> Self {
        let fresh = Scheduler::new(kind, &[lr]);
        Self {
            now: fresh.clone(),
            fresh,
            calls: 0,
        }
    }
}

impl LrScheduler for TorchSchedule {
    fn step(&mut self) -> LearningRate {
        if self.calls > 0 {
            self.now.step();
        }
        self.calls += 1;
        self.now.lrs()[0]
    }

    /// The number of `step()` calls so far (the schedule is a function of it).
    fn to_record(&self) -> LrSchedulerRecord {
        LrSchedulerRecord::new().with_scalar("calls", self.calls)
    }

    /// Replays the recorded number of calls from the start.
    fn load_record(&mut self, record: LrSchedulerRecord) {
        let calls: u64 = record.scalar("calls").unwrap_or(0);
        *self = Self {
            now: self.fresh.clone(),
            fresh: self.fresh.clone(),
            calls: 0,
        };
        for _ in 0..calls {
            self.step();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::ParamId;

    fn lrs(s: &mut ModuleLrScheduler, ids: &[ParamId], n: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|_| {
                let lr = s.step();
                ids.iter().map(|&id| lr.lr_from_param(id, None)).collect()
            })
            .collect()
    }

    /// burn's cosine (a closed form) is PyTorch's (a recursion) to float64 rounding, within
    /// the relative 2⁻⁴⁰ the comparison of the loop's scalars admits (past T_max, where the
    /// cosine climbs back, PyTorch's recursion has gathered a few dozen ulps), and each group
    /// schedules its own base.
    #[test]
    fn builtin_cosine_per_group_is_pytorchs_to_rounding() -> Result<()> {
        let kind = Kind::CosineAnnealingLR {
            T_max: 10,
            eta_min: 0.0,
        };
        let (a, b) = (ParamId::new(), ParamId::new());
        let groups = [
            (ParamGroup::from_ids(vec![a]), 0.02),
            (ParamGroup::all(), 0.1),
        ];
        let (mut s, name) = module_scheduler(Some(&kind), &groups)?;
        assert_eq!(name, "burn::optim::lr_scheduler");
        let mut torch = Scheduler::new(&kind, &[0.02, 0.1]);
        for (k, got) in lrs(&mut s, &[a, b], 14).into_iter().enumerate() {
            for (g, w) in got.iter().zip(torch.lrs()) {
                assert!(
                    (g - w).abs() <= 2f64.powi(-40) * w.abs(),
                    "index {k}: {g} vs {w}"
                );
            }
            torch.step();
        }
        Ok(())
    }

    /// A schedule burn lacks is the hand-written one, PyTorch's bit for bit, and its record
    /// restores it.
    #[test]
    fn hand_written_multistep_is_pytorchs_and_resumes() -> Result<()> {
        let kind = Kind::MultiStepLR {
            milestones: vec![2, 5],
            gamma: 0.5,
        };
        let a = ParamId::new();
        let (mut s, name) = module_scheduler(Some(&kind), &[(ParamGroup::all(), 0.1)])?;
        assert_eq!(name, "hand-written LrScheduler");
        let mut torch = Scheduler::new(&kind, &[0.1]);
        let mut want = Vec::new();
        for _ in 0..8 {
            want.push(vec![torch.lrs()[0]]);
            torch.step();
        }
        assert_eq!(lrs(&mut s, &[a], 8), want);

        let mut t = TorchSchedule::new(&kind, 0.1);
        let first: Vec<f64> = (0..3).map(|_| t.step()).collect();
        let mut resumed = TorchSchedule::new(&kind, 0.1);
        resumed.load_record(t.to_record());
        assert_eq!(first, want[..3].iter().map(|v| v[0]).collect::<Vec<_>>());
        assert_eq!(resumed.step(), want[3][0]);
        Ok(())
    }

    /// What burn cannot run is refused with its reason.
    #[test]
    fn refusals_name_the_reason() {
        let cyc = Kind::OneCycleLR {
            max_lr: 0.1,
            total_steps: 10,
            pct_start: 0.3,
            anneal_strategy: parity_common::schedule::Anneal::Cos,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
        };
        let err = module_scheduler(Some(&cyc), &[(ParamGroup::all(), 0.1)])
            .err()
            .unwrap();
        assert!(err.to_string().contains("cycle_momentum"), "{err:#}");
        let big = Kind::ExponentialLR { gamma: 0.9 };
        let err = module_scheduler(Some(&big), &[(ParamGroup::all(), 2.0)])
            .err()
            .unwrap();
        assert!(err.to_string().contains("at most 1"), "{err:#}");
    }
}
