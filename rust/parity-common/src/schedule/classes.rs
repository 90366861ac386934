//! Each PyTorch scheduler class's own rule (`torch/optim/lr_scheduler.py`): its initial
//! step, its recursive `step()` and, where a SequentialLR needs one, its closed form; and
//! transformers' two warm-up lambdas. [`super::Scheduler`] composes them.

use std::f64::consts::PI;

use super::{Anneal, Kind};

/// One of PyTorch's `LRScheduler`s with its state (a SequentialLR's member too).
#[derive(Debug, Clone)]
pub(super) struct Sched {
    pub(super) kind: Kind,
    /// `base_lrs`: each group's `initial_lr` when the scheduler was made.
    pub(super) base: Vec<f64>,
    pub(super) last_epoch: i64,
    pub(super) step_count: u32,
    /// `_is_initial`: inside the constructor's initial step.
    pub(super) initial: bool,
    /// OneCycleLR's per-group `initial_lr`, `max_lr`, `min_lr`.
    pub(super) cycle: Vec<(f64, f64, f64)>,
    /// OneCycleLR's per-group momentum (or β₁), set by its `get_lr`.
    pub(super) momenta: Option<Vec<f64>>,
}

impl Sched {
    /// The scheduler made over groups whose lrs are `lrs` (`initial_lr` is set from them
    /// where a first scheduler has not set it: `initial`), and its initial step.
    pub(super) fn new(kind: Kind, initial: &[f64], lrs: &mut [f64]) -> Self {
        let mut base = initial.to_vec();
        let mut cycle = Vec::new();
        let mut momenta = None;
        if let Kind::OneCycleLR {
            max_lr,
            div_factor,
            final_div_factor,
            cycle_momentum,
            max_momentum,
            ..
        } = kind
        {
            // OneCycleLR overwrites initial_lr (not setdefault): max_lr / div_factor.
            cycle = base
                .iter()
                .map(|_| {
                    let init = max_lr / div_factor;
                    (init, max_lr, init / final_div_factor)
                })
                .collect();
            base = cycle.iter().map(|c| c.0).collect();
            if cycle_momentum {
                momenta = Some(vec![max_momentum; lrs.len()]);
            }
        }
        let mut s = Sched {
            kind,
            base,
            last_epoch: -1,
            step_count: 0,
            initial: false,
            cycle,
            momenta,
        };
        s.initial_step(lrs);
        s
    }

    /// `_initial_step`: the step count reset, one step in initial mode.
    pub(super) fn initial_step(&mut self, lrs: &mut [f64]) {
        self.step_count = 0;
        self.initial = true;
        self.step(lrs);
        self.initial = false;
    }

    /// `step()`: the step count, then `_update_lr(None)`.
    pub(super) fn step(&mut self, lrs: &mut [f64]) {
        self.step_count += 1;
        self.last_epoch += 1;
        let v = self.get_lr(lrs);
        lrs.copy_from_slice(&v);
    }

    /// `_update_lr(epoch)` with an epoch: `last_epoch` set, the closed form.
    pub(super) fn update_to(&mut self, epoch: i64, lrs: &mut [f64]) {
        self.last_epoch = epoch;
        let v = self.closed_form();
        lrs.copy_from_slice(&v);
    }

    /// `get_lr()` of the class, from the groups' current `lrs`.
    fn get_lr(&mut self, lrs: &[f64]) -> Vec<f64> {
        let e = self.last_epoch;
        let ef = e as f64;
        match self.kind {
            Kind::StepLR { step_size, gamma } => {
                if e == 0 || e % i64::from(step_size) != 0 {
                    lrs.to_vec()
                } else {
                    lrs.iter().map(|lr| lr * gamma).collect()
                }
            }
            Kind::MultiStepLR {
                ref milestones,
                gamma,
            } => {
                let count = milestones.iter().filter(|&&m| i64::from(m) == e).count();
                if count == 0 {
                    lrs.to_vec()
                } else {
                    lrs.iter().map(|lr| lr * gamma.powf(count as f64)).collect()
                }
            }
            Kind::ExponentialLR { gamma } => {
                if self.initial {
                    lrs.to_vec()
                } else {
                    lrs.iter().map(|lr| lr * gamma).collect()
                }
            }
            Kind::CosineAnnealingLR { T_max, eta_min } => {
                let t = f64::from(T_max);
                if self.initial {
                    lrs.to_vec()
                } else if self.step_count == 1 && e > 0 {
                    self.base
                        .iter()
                        .map(|b| eta_min + (b - eta_min) * (1.0 + (ef * PI / t).cos()) / 2.0)
                        .collect()
                } else if (e - 1 - i64::from(T_max)).rem_euclid(2 * i64::from(T_max)) == 0 {
                    lrs.iter()
                        .zip(&self.base)
                        .map(|(lr, b)| lr + (b - eta_min) * (1.0 - (PI / t).cos()) / 2.0)
                        .collect()
                } else {
                    lrs.iter()
                        .map(|lr| {
                            (1.0 + (PI * ef / t).cos()) / (1.0 + (PI * (ef - 1.0) / t).cos())
                                * (lr - eta_min)
                                + eta_min
                        })
                        .collect()
                }
            }
            Kind::LinearLR {
                start_factor,
                end_factor,
                total_iters,
            } => {
                if e == 0 {
                    lrs.iter().map(|lr| lr * start_factor).collect()
                } else if self.initial || e > i64::from(total_iters) {
                    lrs.to_vec()
                } else {
                    let d = end_factor - start_factor;
                    lrs.iter()
                        .map(|lr| {
                            lr * (1.0
                                + d / (f64::from(total_iters) * start_factor + (ef - 1.0) * d))
                        })
                        .collect()
                }
            }
            Kind::OneCycleLR {
                total_steps,
                pct_start,
                anneal_strategy,
                cycle_momentum,
                base_momentum,
                max_momentum,
                three_phase,
                ..
            } => {
                let total = f64::from(total_steps);
                // (end_step, start_lr, end_lr, start_momentum, end_momentum) per phase; the
                // lrs as indices: 0 initial_lr, 1 max_lr, 2 min_lr; momenta: 0 max, 1 base.
                let phases: Vec<(f64, usize, usize, usize, usize)> = if three_phase {
                    vec![
                        (pct_start * total - 1.0, 0, 1, 0, 1),
                        (2.0 * pct_start * total - 2.0, 1, 0, 1, 0),
                        (total - 1.0, 0, 2, 0, 0),
                    ]
                } else {
                    vec![
                        (pct_start * total - 1.0, 0, 1, 0, 1),
                        (total - 1.0, 1, 2, 1, 0),
                    ]
                };
                let anneal = |start: f64, end: f64, pct: f64| match anneal_strategy {
                    Anneal::Cos => end + (start - end) / 2.0 * ((PI * pct).cos() + 1.0),
                    Anneal::Linear => (end - start) * pct + start,
                };
                let mut out = Vec::with_capacity(lrs.len());
                let mut momenta = Vec::with_capacity(lrs.len());
                for &(init, max, min) in &self.cycle {
                    let lr_of = [init, max, min];
                    let mom_of = [max_momentum, base_momentum];
                    let mut start = 0.0;
                    for (i, &(end, s_lr, e_lr, s_m, e_m)) in phases.iter().enumerate() {
                        if ef <= end || i == phases.len() - 1 {
                            let pct = (ef - start) / (end - start);
                            out.push(anneal(lr_of[s_lr], lr_of[e_lr], pct));
                            momenta.push(anneal(mom_of[s_m], mom_of[e_m], pct));
                            break;
                        }
                        start = end;
                    }
                }
                if cycle_momentum {
                    self.momenta = Some(momenta);
                }
                out
            }
            Kind::CosineWithWarmup {
                num_warmup_steps,
                num_training_steps,
                num_cycles,
            } => self
                .base
                .iter()
                .map(|b| {
                    b * cosine_with_warmup(e, num_warmup_steps, num_training_steps, num_cycles)
                })
                .collect(),
            Kind::LinearWithWarmup {
                num_warmup_steps,
                num_training_steps,
            } => self
                .base
                .iter()
                .map(|b| b * linear_with_warmup(e, num_warmup_steps, num_training_steps))
                .collect(),
            Kind::SequentialLR { .. } => unreachable!("a SequentialLR is not a member"),
        }
    }

    /// `_get_closed_form_lr()` of a class SequentialLR chains.
    fn closed_form(&self) -> Vec<f64> {
        let e = self.last_epoch;
        let ef = e as f64;
        let out = |f: &dyn Fn(f64) -> f64| self.base.iter().map(|&b| f(b)).collect();
        match self.kind {
            Kind::StepLR { step_size, gamma } => {
                out(&|b| b * gamma.powf((e.div_euclid(i64::from(step_size))) as f64))
            }
            Kind::MultiStepLR {
                ref milestones,
                gamma,
            } => {
                let n = milestones.iter().filter(|&&m| i64::from(m) <= e).count();
                out(&|b| b * gamma.powf(n as f64))
            }
            Kind::ExponentialLR { gamma } => out(&|b| b * gamma.powf(ef)),
            Kind::CosineAnnealingLR { T_max, eta_min } => {
                out(&|b| eta_min + (b - eta_min) * (1.0 + (ef * PI / f64::from(T_max)).cos()) / 2.0)
            }
            Kind::LinearLR {
                start_factor,
                end_factor,
                total_iters,
            } => out(&|b| {
                b * (start_factor
                    + (end_factor - start_factor) * (i64::from(total_iters).min(e) as f64)
                        / f64::from(total_iters))
            }),
            _ => unreachable!("only the chainable schedules have a closed form here"),
        }
    }
}

/// transformers' `_get_cosine_schedule_with_warmup_lr_lambda` (min_lr_rate 0) at step `e`.
fn cosine_with_warmup(e: i64, warmup: u32, total: u32, cycles: f64) -> f64 {
    if e < i64::from(warmup) {
        return e as f64 / f64::from(warmup.max(1));
    }
    let progress =
        (e - i64::from(warmup)) as f64 / (i64::from(total) - i64::from(warmup)).max(1) as f64;
    let factor = 0.5 * (1.0 + (PI * cycles * 2.0 * progress).cos());
    let factor = factor * (1.0 - 0.0) + 0.0;
    // Python's max(0, factor) gives the integer 0 for factor ≤ 0.
    if factor > 0.0 {
        factor
    } else {
        0.0
    }
}

/// transformers' `_get_linear_schedule_with_warmup_lr_lambda` at step `e`.
fn linear_with_warmup(e: i64, warmup: u32, total: u32) -> f64 {
    if e < i64::from(warmup) {
        return e as f64 / f64::from(warmup.max(1));
    }
    let v = (i64::from(total) - e) as f64 / (i64::from(total) - i64::from(warmup)).max(1) as f64;
    v.max(0.0)
}
