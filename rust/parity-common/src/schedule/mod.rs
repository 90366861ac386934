//! Learning-rate schedules as PyTorch 2.15 computes them (`torch/optim/lr_scheduler.py`; the
//! two warm-up schedules are transformers 5's `optimization.py`, `LambdaLR`s), for a runner
//! whose framework has none of its own or whose porter writes them by hand (candle:
//! `opt.set_learning_rate(lr)` before each step, docs/loop.md).
//!
//! PyTorch's schedulers are stateful and most are *recursive*: `step()` computes each
//! group's new lr from its current one (`StepLR` multiplies it by γ at a multiple of
//! `step_size`, `CosineAnnealingLR` scales `lr − η_min` by a ratio of cosines), not from a
//! closed form, so a port that computes the closed form gets values that differ in the last
//! bits of a float64 lr (docs/loop.md measures how often). [`Scheduler`] keeps the same
//! state (`last_epoch`, the step count, the initial-step flag, each group's lr) and
//! evaluates the same expressions in the same order with the same libm functions (`cos`,
//! `pow`), so its learning rates equal PyTorch's bit for bit (the tests hold it to values
//! PyTorch printed).
//!
//! Construction is PyTorch's: a scheduler performs an initial step that sets the index-0
//! learning rate, which the first optimizer step uses; [`Scheduler::step`] moves to the next.

use serde::Deserialize;

mod classes;

use classes::Sched;

/// A schedule and where its step goes ([`Order`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// The schedule.
    pub kind: Kind,
    /// Whether `scheduler.step()` follows the optimizer's step (as PyTorch requires) or
    /// precedes it.
    pub order: Order,
}

/// Where `scheduler.step()` goes in a training step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// After `optimizer.step()`, as PyTorch requires: step t uses the schedule's index t − 1.
    After,
    /// Before it: step t uses index t, the first value is skipped (PyTorch warns of it; a
    /// port that steps its scheduler first is one step early).
    Before,
}

/// How OneCycleLR anneals between its phases' ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Anneal {
    /// `end + (start − end)/2·(cos(π·pct) + 1)`.
    Cos,
    /// `(end − start)·pct + start`.
    Linear,
}

/// A schedule by PyTorch's class name and arguments, every one explicit.
#[allow(non_snake_case, missing_docs)]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", deny_unknown_fields)]
pub enum Kind {
    /// `StepLR(step_size, gamma)`.
    StepLR { step_size: u32, gamma: f64 },
    /// `MultiStepLR(milestones, gamma)`.
    MultiStepLR { milestones: Vec<u32>, gamma: f64 },
    /// `ExponentialLR(gamma)`.
    ExponentialLR { gamma: f64 },
    /// `CosineAnnealingLR(T_max, eta_min)`.
    CosineAnnealingLR { T_max: u32, eta_min: f64 },
    /// `LinearLR(start_factor, end_factor, total_iters)`.
    LinearLR {
        start_factor: f64,
        end_factor: f64,
        total_iters: u32,
    },
    /// `OneCycleLR(max_lr, total_steps, …)`; with `cycle_momentum` it also sets each group's
    /// momentum (SGD) or β₁ (Adam, AdamW) every step ([`Scheduler::momenta`]).
    OneCycleLR {
        max_lr: f64,
        total_steps: u32,
        pct_start: f64,
        anneal_strategy: Anneal,
        cycle_momentum: bool,
        base_momentum: f64,
        max_momentum: f64,
        div_factor: f64,
        final_div_factor: f64,
        three_phase: bool,
    },
    /// `SequentialLR(schedulers, milestones)`.
    SequentialLR {
        schedulers: Vec<Kind>,
        milestones: Vec<u32>,
    },
    /// transformers' `get_cosine_schedule_with_warmup`: a `LambdaLR`.
    #[serde(rename = "get_cosine_schedule_with_warmup")]
    CosineWithWarmup {
        num_warmup_steps: u32,
        num_training_steps: u32,
        num_cycles: f64,
    },
    /// transformers' `get_linear_schedule_with_warmup`: a `LambdaLR`.
    #[serde(rename = "get_linear_schedule_with_warmup")]
    LinearWithWarmup {
        num_warmup_steps: u32,
        num_training_steps: u32,
    },
}

impl Kind {
    /// Whether the schedule sets the optimizer's momentum (SGD) or β₁ (Adam, AdamW) every
    /// step: a OneCycleLR with `cycle_momentum`. An SGD built without momentum then has one,
    /// as PyTorch's OneCycleLR gives it.
    pub fn cycles_momentum(&self) -> bool {
        matches!(
            self,
            Kind::OneCycleLR {
                cycle_momentum: true,
                ..
            }
        )
    }
}

/// The schedule of one run: each group's learning rate as PyTorch's scheduler sets it
/// (module docs), and OneCycleLR's momenta.
#[derive(Debug, Clone)]
pub struct Scheduler {
    top: Top,
    lrs: Vec<f64>,
}

#[derive(Debug, Clone)]
enum Top {
    One(Sched),
    Sequential {
        members: Vec<Sched>,
        milestones: Vec<u32>,
        last_epoch: i64,
    },
}

impl Scheduler {
    /// The scheduler of `kind` made over groups whose learning rates are `lrs` (each
    /// group's `lr` when the optimizer was made), after its initial step:
    /// [`Scheduler::lrs`] is then the index-0 value.
    pub fn new(kind: &Kind, lrs: &[f64]) -> Self {
        let mut now = lrs.to_vec();
        let top = match kind {
            Kind::SequentialLR {
                schedulers,
                milestones,
            } => {
                // Each member is made first (each an initial step on the groups' lrs), then
                // SequentialLR resets them to initial_lr, undoes the members' steps and
                // repeats the first member's initial step.
                let mut members: Vec<Sched> = schedulers
                    .iter()
                    .map(|k| Sched::new(k.clone(), lrs, &mut now))
                    .collect();
                now.copy_from_slice(lrs);
                for m in &mut members {
                    m.last_epoch -= 1;
                }
                let first = bisect_right(milestones, 0);
                members[first].initial_step(&mut now);
                Top::Sequential {
                    members,
                    milestones: milestones.clone(),
                    last_epoch: 0,
                }
            }
            k => Top::One(Sched::new(k.clone(), lrs, &mut now)),
        };
        Scheduler { top, lrs: now }
    }

    /// `scheduler.step()`: the next index.
    pub fn step(&mut self) {
        match &mut self.top {
            Top::One(s) => s.step(&mut self.lrs),
            Top::Sequential {
                members,
                milestones,
                last_epoch,
            } => {
                *last_epoch += 1;
                let idx = bisect_right(milestones, *last_epoch);
                if idx > 0 && i64::from(milestones[idx - 1]) == *last_epoch {
                    members[idx].update_to(0, &mut self.lrs);
                } else {
                    members[idx].step(&mut self.lrs);
                }
            }
        }
    }

    /// Each group's learning rate now (`group["lr"]`).
    pub fn lrs(&self) -> &[f64] {
        &self.lrs
    }

    /// OneCycleLR with `cycle_momentum`: each group's momentum (SGD) or β₁ (Adam, AdamW) now;
    /// `None` for every other schedule.
    pub fn momenta(&self) -> Option<&[f64]> {
        match &self.top {
            Top::One(s) => s.momenta.as_deref(),
            Top::Sequential { .. } => None,
        }
    }
}

/// Python's `bisect_right(milestones, e)`: how many milestones are at most `e`.
fn bisect_right(milestones: &[u32], e: i64) -> usize {
    milestones.iter().filter(|&&m| i64::from(m) <= e).count()
}

#[cfg(test)]
mod tests;
