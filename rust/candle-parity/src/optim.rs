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

use std::hint::black_box;

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::{AdamW, Optimizer as _, ParamsAdamW, SGD};
use parity_common::optim::{FrameMoments, RunOptimizer};
use parity_common::replay::{Moments, StateTensor};
use parity_common::spec::{AdamWImpl, FactorType, Fault, FloatType, Optimizer};

use crate::device::{state_tensor, to_raw};
use crate::model::Net;

/// Bias-correction factors `(1/(1−β₁ᵗ), 1/(1−β₂ᵗ))` for step `t` (from 1).
///
/// With [`FactorType::F64`] this is candle-nn 0.11.0 `AdamW::step`'s `scale_m`/`scale_v`
/// (and PyTorch's, which computes `1 - beta1 ** step` in Python floats). With
/// [`FactorType::F32`] the betas are rounded to float32 and everything is computed in
/// float32, the result widened; `black_box` keeps the compiler from folding it in float64.
pub fn bias_correction(beta1: f64, beta2: f64, t: i32, ty: FactorType) -> (f64, f64) {
    match ty {
        FactorType::F64 => (1f64 / (1f64 - beta1.powi(t)), 1f64 / (1f64 - beta2.powi(t))),
        FactorType::F32 => {
            let b1 = black_box(beta1 as f32);
            let b2 = black_box(beta2 as f32);
            (
                (1f32 / (1f32 - b1.powi(t))) as f64,
                (1f32 / (1f32 - b2.powi(t))) as f64,
            )
        }
    }
}

/// The hand-written AdamW (see the module docs).
pub struct ManualAdamW {
    vars: Vec<Var>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    step_t: usize,
    params: ParamsAdamW,
    factors: FactorType,
    fault: Fault,
}

impl ManualAdamW {
    /// Zero moments for every var, in the vars' dtype and device. `fault` is
    /// [`Fault::None`] except in the detection-power suite; faults other than the AdamW ones
    /// ([`Fault::in_adamw`]) do not concern the update and are ignored here.
    ///
    /// # Errors
    /// When allocation fails.
    pub fn new(
        vars: Vec<Var>,
        params: ParamsAdamW,
        factors: FactorType,
        fault: Fault,
    ) -> Result<Self> {
        let exp_avg = vars
            .iter()
            .map(|v| v.zeros_like())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let exp_avg_sq = exp_avg.clone();
        Ok(Self {
            vars,
            exp_avg,
            exp_avg_sq,
            step_t: 0,
            params,
            factors,
            fault,
        })
    }

    /// Starts from given moments, as if `steps_taken` steps had been taken: the next
    /// [`ManualAdamW::step`] is step `steps_taken + 1` (its bias correction uses that `t`).
    /// `exp_avg` and `exp_avg_sq` hold one tensor per var, in the vars' order, each of its
    /// var's shape, dtype and device. `factors` and `fault` as in [`ManualAdamW::new`].
    ///
    /// # Errors
    /// When the number of moments differs from the number of vars, or a moment's shape,
    /// dtype or device differs from its var's.
    pub fn from_state(
        vars: Vec<Var>,
        params: ParamsAdamW,
        factors: FactorType,
        fault: Fault,
        exp_avg: Vec<Tensor>,
        exp_avg_sq: Vec<Tensor>,
        steps_taken: usize,
    ) -> Result<Self> {
        for (what, moments) in [("exp_avg", &exp_avg), ("exp_avg_sq", &exp_avg_sq)] {
            if moments.len() != vars.len() {
                bail!("{} {what} tensors for {} vars", moments.len(), vars.len());
            }
            for (i, (m, v)) in moments.iter().zip(&vars).enumerate() {
                if m.dims() != v.dims()
                    || m.dtype() != v.dtype()
                    || !m.device().same_device(v.device())
                {
                    bail!(
                        "{what}[{i}] is {:?} {:?} on {:?}; its var is {:?} {:?} on {:?}",
                        m.dtype(),
                        m.dims(),
                        m.device(),
                        v.dtype(),
                        v.dims(),
                        v.device()
                    );
                }
            }
        }
        Ok(Self {
            vars,
            exp_avg,
            exp_avg_sq,
            step_t: steps_taken,
            params,
            factors,
            fault,
        })
    }

    /// One step. Same expression tree as candle-nn 0.11.0 `AdamW::step`:
    /// m ← β₁m + (1−β₁)g; v ← β₂v + (1−β₂)g²; θ ← θ(1 − lr·λ) − lr·(m·s_m)/(√(v·s_v) + ε).
    ///
    /// Faults: [`Fault::EpsInSqrt`] divides by √(v·s_v + ε); [`Fault::NoBiasCorrection`]
    /// takes s_m = s_v = 1; [`Fault::StepFromZero`] computes s_m, s_v for t − 1 (infinite at
    /// step 1, where 1 − β⁰ = 0, so the parameters become NaN).
    ///
    /// # Errors
    /// On tensor failures.
    pub fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step_t += 1;
        let lr = self.params.lr;
        let lr_lambda = lr * self.params.weight_decay;
        let beta1 = self.params.beta1;
        let beta2 = self.params.beta2;
        let t = match self.fault {
            Fault::StepFromZero => self.step_t as i32 - 1,
            _ => self.step_t as i32,
        };
        let (scale_m, scale_v) = match self.fault {
            Fault::NoBiasCorrection => (1f64, 1f64),
            _ => bias_correction(beta1, beta2, t, self.factors),
        };
        for (i, theta) in self.vars.iter().enumerate() {
            let Some(g) = grads.get(theta) else { continue };
            let next_m = ((&self.exp_avg[i] * beta1)? + (g * (1.0 - beta1))?)?;
            let next_v = ((&self.exp_avg_sq[i] * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let m_hat = (&next_m * scale_m)?;
            let v_hat = (&next_v * scale_v)?;
            let next_theta = (theta.as_tensor() * (1f64 - lr_lambda))?;
            let denom = match self.fault {
                Fault::EpsInSqrt => (v_hat + self.params.eps)?.sqrt()?,
                _ => (v_hat.sqrt()? + self.params.eps)?,
            };
            let adjusted_grad = (m_hat / denom)?;
            let next_theta = (next_theta - (adjusted_grad * lr)?)?;
            self.exp_avg[i] = next_m;
            self.exp_avg_sq[i] = next_v;
            theta.set(&next_theta)?;
        }
        Ok(())
    }
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
            Stepper::Manual(o) => Some((&o.exp_avg[i], &o.exp_avg_sq[i])),
            _ => None,
        }
    }
}

/// candle-parity's side of the optimizer both runners drive (see [`RunOptimizer`]): the
/// optimizer holds the net's `Var`s (the ones [`Net::vars`] gave [`Stepper::new`] or
/// [`Stepper::from_state`]) and updates them in place.
impl RunOptimizer for Stepper {
    type Params = Net;

    /// `candle_nn::SGD`, `candle_nn::AdamW` or `candle_parity::optim::ManualAdamW`.
    fn name(&self) -> &'static str {
        match self {
            Stepper::Sgd(_) => "candle_nn::SGD",
            Stepper::AdamW(_) => "candle_nn::AdamW",
            Stepper::Manual(_) => "candle_parity::optim::ManualAdamW",
        }
    }

    /// `opt.step(&grads)` on the `Var`s the optimizer holds, which are `net`'s; `net` comes
    /// back with them updated.
    ///
    /// # Errors
    /// On tensor failures.
    fn step(&mut self, net: Net, grads: GradStore) -> Result<Net> {
        match self {
            Stepper::Sgd(o) => o.step(&grads)?,
            Stepper::AdamW(o) => o.step(&grads)?,
            Stepper::Manual(o) => o.step(&grads)?,
        }
        Ok(net)
    }

    /// [`Stepper::moments`] of each kept parameter, copied by [`to_raw`] (the run dtype:
    /// the moments are in their `Var`'s).
    ///
    /// # Errors
    /// For an optimizer other than [`ManualAdamW`] (candle-nn's keep their moments private,
    /// SGD has none), or when a device copy fails.
    fn frame_moments(
        &self,
        net: &Net,
        _ty: FloatType,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<FrameMoments>> {
        let mut out = Vec::new();
        for (i, (name, _)) in net.params().iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// candle-parity refuses what candle cannot run instead of substituting something else.
    #[test]
    fn adam_and_burn_adamw_are_refused() {
        let var = Var::new(&[1.0f32], &Device::Cpu).unwrap();
        let adam = Optimizer::Adam {
            lr: 0.01,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let err = Stepper::new(&adam, vec![var.clone()], false, Fault::None)
            .err()
            .unwrap();
        assert!(err.to_string().contains("no Adam"), "{err:#}");
        let burn = Optimizer::Adamw {
            lr: 0.01,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.01,
            implementation: AdamWImpl::Burn,
            bias_correction: FactorType::F32,
        };
        let err = Stepper::new(&burn, vec![var], false, Fault::None)
            .err()
            .unwrap();
        assert!(err.to_string().contains("burn's AdamW"), "{err:#}");
    }

    #[test]
    fn f64_factors_match_candle_nn_formula() {
        let (m, v) = bias_correction(0.9, 0.999, 1, FactorType::F64);
        assert_eq!(m, 1.0 / (1.0 - 0.9f64));
        assert_eq!(v, 1.0 / (1.0 - 0.999f64));
    }

    #[test]
    fn f32_factors_differ_from_f64_at_step_one() {
        let (_, v64) = bias_correction(0.9, 0.999, 1, FactorType::F64);
        let (_, v32) = bias_correction(0.9, 0.999, 1, FactorType::F32);
        // 1 - 0.999 in float32 is 0.0009999871..., a relative error of about 1.3e-5.
        let rel = (v32 - v64).abs() / v64;
        assert!(rel > 1e-6 && rel < 1e-4, "relative error {rel}");
    }

    /// The identity the ablation rests on: with float64 factors the manual AdamW equals
    /// candle-nn's AdamW bit for bit.
    #[test]
    fn manual_adamw_with_f64_factors_equals_candle_adamw_bitwise() -> Result<()> {
        let dev = Device::Cpu;
        let init = Tensor::new(&[0.5f32, -1.25, 2.0, 1e-3], &dev)?;
        let a = Var::from_tensor(&init)?;
        let b = Var::from_tensor(&init)?;
        let params = ParamsAdamW {
            lr: 0.01,
            weight_decay: 0.01,
            ..ParamsAdamW::default()
        };
        let mut oa = AdamW::new(vec![a.clone()], params.clone())?;
        let mut ob = ManualAdamW::new(vec![b.clone()], params, FactorType::F64, Fault::None)?;
        let c = Tensor::new(&[0.3f32, -0.7, 1.1, 2.5], &dev)?;
        for _ in 0..50 {
            let ga = (a.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
            oa.step(&ga)?;
            let gb = (b.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
            ob.step(&gb)?;
            let va = a.as_tensor().to_vec1::<f32>()?;
            let vb = b.as_tensor().to_vec1::<f32>()?;
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&va), bits(&vb));
        }
        assert_eq!(a.dtype(), DType::F32);
        Ok(())
    }

    /// Three steps of the manual AdamW on `f(θ) = Σ c·θ²` from fixed values, with `fault`.
    fn three_steps(fault: Fault) -> Result<Vec<f32>> {
        let dev = Device::Cpu;
        let theta = Var::from_tensor(&Tensor::new(&[0.5f32, -1.25, 2.0, 1e-3], &dev)?)?;
        let params = ParamsAdamW {
            lr: 0.01,
            weight_decay: 0.01,
            ..ParamsAdamW::default()
        };
        let mut opt = ManualAdamW::new(vec![theta.clone()], params, FactorType::F64, fault)?;
        let c = Tensor::new(&[0.3f32, -0.7, 1.1, 2.5], &dev)?;
        for _ in 0..3 {
            let g = (theta.as_tensor().sqr()? * &c)?.sum_all()?.backward()?;
            opt.step(&g)?;
        }
        Ok(theta.as_tensor().to_vec1::<f32>()?)
    }

    #[test]
    fn each_adamw_fault_changes_the_update() -> Result<()> {
        let clean = three_steps(Fault::None)?;
        for fault in [Fault::EpsInSqrt, Fault::NoBiasCorrection] {
            let faulty = three_steps(fault)?;
            assert!(
                faulty.iter().all(|v| v.is_finite()),
                "{fault:?}: {faulty:?}"
            );
            assert_ne!(faulty, clean, "{fault:?} left the update unchanged");
        }
        // 1 − β⁰ = 0: the factors are infinite at step 1 and the update is NaN.
        let from_zero = three_steps(Fault::StepFromZero)?;
        assert!(from_zero.iter().all(|v| v.is_nan()), "{from_zero:?}");
        // Faults outside the update leave it bit for bit as it was.
        let other = three_steps(Fault::MseSum)?;
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&other), bits(&clean));
        Ok(())
    }

    #[test]
    fn adamw_faults_are_refused_for_candle_nn_adamw() {
        let v = Var::from_tensor(&Tensor::new(&[1f32], &Device::Cpu).unwrap()).unwrap();
        let spec = Optimizer::Adamw {
            lr: 0.01,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.01,
            implementation: AdamWImpl::Candle,
            bias_correction: FactorType::F64,
        };
        let err = Stepper::new(&spec, vec![v], false, Fault::EpsInSqrt)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("manual"), "{err}");
    }
}
