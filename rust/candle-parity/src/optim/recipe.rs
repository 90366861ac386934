//! What candle-nn 0.11 lacks, written as a porter writes it (docs/loop.md, the seed's
//! recipes): PyTorch's SGD with momentum, dampening, Nesterov and L2 weight decay
//! ([`SgdRecipe`]), and PyTorch's Adam/AdamW with per-parameter step counts, L2 or decoupled
//! weight decay and amsgrad ([`AdamRecipe`]), each implementing `candle_nn::Optimizer` so that
//! `set_learning_rate` and `backward_step` work as for candle-nn's own.
//!
//! Each follows PyTorch 2.15's single-tensor path (`torch/optim/sgd.py` `_single_tensor_sgd`,
//! `torch/optim/adam.py` `_single_tensor_adam`) operation by operation, with candle's tensor
//! ops: PyTorch's fused in-place ops (`lerp_`, `addcmul_`, `addcdiv_`, `add_(alpha=)`) round
//! once where a porter's candle expression rounds twice, and candle's `t / s` multiplies by
//! `1/s`, so the float32 results agree with PyTorch's to rounding, and the float64 ones to
//! float64 rounding.

use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
use candle_nn::Optimizer;

/// PyTorch SGD's hyperparameters (`torch.optim.SGD`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamsSgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum μ (0: none, and no buffer is kept).
    pub momentum: f64,
    /// Dampening τ of the momentum (not applied on a buffer's first step).
    pub dampening: f64,
    /// Nesterov momentum: g + μ·b instead of b.
    pub nesterov: bool,
    /// L2 penalty λ: g ← g + λθ.
    pub weight_decay: f64,
}

/// PyTorch's SGD (module docs).
pub struct SgdRecipe {
    vars: Vec<Var>,
    /// The momentum buffer of each var, made on its first step.
    bufs: Vec<Option<Tensor>>,
    params: ParamsSgd,
}

impl SgdRecipe {
    /// Sets the momentum μ (OneCycleLR cycles it).
    pub fn set_momentum(&mut self, momentum: f64) {
        self.params.momentum = momentum;
    }
}

impl Optimizer for SgdRecipe {
    type Config = ParamsSgd;

    fn new(vars: Vec<Var>, params: ParamsSgd) -> candle_core::Result<Self> {
        let bufs = vec![None; vars.len()];
        Ok(Self { vars, bufs, params })
    }

    /// For each var with a gradient g (PyTorch `_single_tensor_sgd`): g ← g + λθ;
    /// with momentum, b ← g on the buffer's first step, else b ← μb + (1 − τ)g, and
    /// g ← g + μb (Nesterov) or b; θ ← θ − lr·g.
    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        let ParamsSgd {
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
        } = self.params;
        for (var, buf) in self.vars.iter().zip(self.bufs.iter_mut()) {
            let Some(g) = grads.get(var) else { continue };
            // Detached: the update must not hang the parameter's graph onto the buffers.
            let theta = var.as_tensor().detach();
            let mut g = g.detach();
            if weight_decay != 0.0 {
                g = (g + (&theta * weight_decay)?)?;
            }
            if momentum != 0.0 {
                let b = match buf.take() {
                    None => g.copy()?,
                    Some(b) => ((b * momentum)? + (&g * (1.0 - dampening))?)?,
                };
                g = if nesterov {
                    (g + (&b * momentum)?)?
                } else {
                    b.clone()
                };
                *buf = Some(b);
            }
            var.set(&(theta - (g * lr)?)?)?;
        }
        Ok(())
    }

    fn learning_rate(&self) -> f64 {
        self.params.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.params.lr = lr;
    }
}

/// PyTorch Adam's and AdamW's hyperparameters (`torch.optim.Adam`, `AdamW`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamsAdam {
    /// Learning rate.
    pub lr: f64,
    /// β₁ (OneCycleLR cycles it).
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε added to the denominator.
    pub eps: f64,
    /// Weight decay λ.
    pub weight_decay: f64,
    /// AdamW's decoupled decay θ ← θ(1 − lr·λ); else Adam's L2 g ← g + λθ.
    pub decoupled: bool,
    /// The maximum of the raw second moments so far in the denominator.
    pub amsgrad: bool,
}

/// PyTorch's Adam/AdamW (module docs): one step count per var, as PyTorch keeps `step` in each
/// parameter's state (candle-nn's AdamW keeps one for the optimizer).
pub struct AdamRecipe {
    vars: Vec<Var>,
    exp_avg: Vec<Tensor>,
    exp_avg_sq: Vec<Tensor>,
    max_exp_avg_sq: Vec<Tensor>,
    steps: Vec<u64>,
    params: ParamsAdam,
}

impl AdamRecipe {
    /// Starts from given moments, as if `steps_taken` steps had been taken by every var (a
    /// replay's state; without amsgrad, whose maxima the state does not hold).
    ///
    /// # Errors
    /// With amsgrad, or moments whose count differs from the vars'.
    pub fn from_state(
        vars: Vec<Var>,
        params: ParamsAdam,
        exp_avg: Vec<Tensor>,
        exp_avg_sq: Vec<Tensor>,
        steps_taken: u64,
    ) -> Result<Self> {
        if params.amsgrad {
            anyhow::bail!("an amsgrad Adam cannot start from exp_avg and exp_avg_sq alone (its max_exp_avg_sq is not in the state)");
        }
        if exp_avg.len() != vars.len() || exp_avg_sq.len() != vars.len() {
            anyhow::bail!("{} moment tensors for {} vars", exp_avg.len(), vars.len());
        }
        let mut s = Self::new(vars, params)?;
        s.exp_avg = exp_avg;
        s.exp_avg_sq = exp_avg_sq;
        s.steps = vec![steps_taken; s.vars.len()];
        Ok(s)
    }

    /// `(exp_avg, exp_avg_sq)` of var `i`.
    ///
    /// # Panics
    /// When `i` is not below the number of vars.
    pub fn moments(&self, i: usize) -> (&Tensor, &Tensor) {
        (&self.exp_avg[i], &self.exp_avg_sq[i])
    }

    /// Sets β₁ (OneCycleLR cycles it).
    pub fn set_beta1(&mut self, beta1: f64) {
        self.params.beta1 = beta1;
    }
}

impl Optimizer for AdamRecipe {
    type Config = ParamsAdam;

    fn new(vars: Vec<Var>, params: ParamsAdam) -> candle_core::Result<Self> {
        let zeros = vars
            .iter()
            .map(|v| v.as_tensor().zeros_like())
            .collect::<candle_core::Result<Vec<_>>>()?;
        let n = vars.len();
        Ok(Self {
            vars,
            exp_avg: zeros.clone(),
            exp_avg_sq: zeros.clone(),
            max_exp_avg_sq: zeros,
            steps: vec![0; n],
            params,
        })
    }

    /// For each var with a gradient g (PyTorch `_single_tensor_adam`): t ← t + 1; AdamW
    /// θ ← θ(1 − lr·λ), Adam g ← g + λθ; m ← β₁m + (1 − β₁)g; v ← β₂v + (1 − β₂)g²;
    /// with amsgrad v̂ ← max(v̂, v), else v̂ = v; θ ← θ − (lr/(1 − β₁ᵗ))·m / (√v̂/√(1 − β₂ᵗ) + ε),
    /// the bias corrections in float64 (`beta ** step`, Python's pow).
    fn step(&mut self, grads: &GradStore) -> candle_core::Result<()> {
        let p = self.params;
        for i in 0..self.vars.len() {
            let var = &self.vars[i];
            let Some(g) = grads.get(var) else { continue };
            self.steps[i] += 1;
            let t = self.steps[i] as f64;
            let mut theta = var.as_tensor().detach();
            let mut g = g.detach();
            if p.decoupled {
                theta = (theta * (1.0 - p.lr * p.weight_decay))?;
            } else if p.weight_decay != 0.0 {
                g = (g + (&theta * p.weight_decay)?)?;
            }
            let m = ((&self.exp_avg[i] * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
            let v = ((&self.exp_avg_sq[i] * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            let bias_correction1 = 1.0 - p.beta1.powf(t);
            let bias_correction2 = 1.0 - p.beta2.powf(t);
            let step_size = p.lr / bias_correction1;
            let denom_v = if p.amsgrad {
                let vmax = self.max_exp_avg_sq[i].maximum(&v)?;
                self.max_exp_avg_sq[i] = vmax.clone();
                vmax
            } else {
                v.clone()
            };
            let denom = ((denom_v.sqrt()? / bias_correction2.sqrt())? + p.eps)?;
            let theta = (theta - ((&m * step_size)? / denom)?)?;
            self.exp_avg[i] = m;
            self.exp_avg_sq[i] = v;
            var.set(&theta)?;
        }
        Ok(())
    }

    fn learning_rate(&self) -> f64 {
        self.params.lr
    }

    fn set_learning_rate(&mut self, lr: f64) {
        self.params.lr = lr;
    }
}
