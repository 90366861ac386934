//! The hand-written AdamW ([`ManualAdamW`]) and its bias-correction factors
//! ([`bias_correction`]); why it exists is in [`super`]'s docs.

use std::hint::black_box;

use anyhow::{bail, Result};
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::ParamsAdamW;
use parity_common::spec::{FactorType, Fault};

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

    /// `(exp_avg, exp_avg_sq)` of var `i` (in the order of the vars it was built with): the
    /// moments after the last [`ManualAdamW::step`], each of its var's shape, dtype and
    /// device (zero before the first step).
    ///
    /// # Panics
    /// When `i` is not below the number of vars.
    pub fn moments(&self, i: usize) -> (&Tensor, &Tensor) {
        (&self.exp_avg[i], &self.exp_avg_sq[i])
    }

    /// The learning rate (`candle_nn::Optimizer::learning_rate` of candle-nn's AdamW).
    pub fn learning_rate(&self) -> f64 {
        self.params.lr
    }

    /// Sets the learning rate, as `candle_nn::AdamW::set_learning_rate` does.
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.params.lr = lr;
    }

    /// Sets β₁, as `candle_nn::AdamW::set_params` can.
    pub fn set_beta1(&mut self, beta1: f64) {
        self.params.beta1 = beta1;
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
