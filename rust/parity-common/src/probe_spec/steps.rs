//! What a probe case does with its inputs and reports: its steps ([`StepSpec`]), the loss
//! ([`LossTerm`]), the optimizer ([`ProbeOptimizer`]) and its state ([`StateSlot`]), and the
//! quantities to compare ([`Quantity`]).

use anyhow::{bail, Result};
use serde::Deserialize;

use super::op::Op;

/// One step: `out = op(inputs…)`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Name of the result; new within its case.
    pub out: String,
    /// Names of the inputs (probe inputs or earlier steps' outs).
    pub inputs: Vec<String>,
    /// The op.
    pub op: Op,
}

/// One term of the scalar loss; terms are added in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossTerm {
    /// Sum of every element.
    Sum {
        /// Tensor name.
        input: String,
    },
    /// Sum of squares of every element.
    SumSquares {
        /// Tensor name.
        input: String,
    },
    /// Sum of `input·weights` over every element (equal shapes).
    WeightedSum {
        /// Tensor name.
        input: String,
        /// Tensor name.
        weights: String,
    },
}

impl LossTerm {
    /// The tensor names the term reads.
    pub fn names(&self) -> Vec<&str> {
        match self {
            LossTerm::Sum { input } | LossTerm::SumSquares { input } => vec![input],
            LossTerm::WeightedSum { input, weights } => vec![input, weights],
        }
    }
}

/// The optimizer that steps every input with `requires_grad`, every hyperparameter explicit.
/// Formulas: PyTorch's documentation of `torch.optim.SGD`, `Adam` and `AdamW` (2.15).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeOptimizer {
    /// g ← g + λθ; with momentum μ: b ← μ·b + (1 − dampening)·g (b = g at the first step),
    /// g ← g + μ·b (nesterov) or b; θ ← θ − lr·g.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// μ (0: plain SGD, no buffer).
        momentum: f64,
        /// Dampening of the buffer.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 weight decay λ (added to the gradient).
        weight_decay: f64,
    },
    /// Adam with L2 weight decay (λθ added to the gradient), bias-corrected moments.
    Adam {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// L2 weight decay λ.
        weight_decay: f64,
    },
    /// AdamW: decoupled weight decay θ ← θ·(1 − lr·λ) before the Adam step.
    Adamw {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// Decoupled weight decay λ.
        weight_decay: f64,
    },
}

/// A name bound to one row per micro-step: at micro-step m (counted over the whole case
/// from 0: optimizer step s, micro-step j, m = s·accumulate + j) `name` is row m of the
/// input `input` (`narrow(0, m, 1)` then `squeeze(0)`), which has one row per micro-step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MicroBatch {
    /// The bound name; new within its case.
    pub name: String,
    /// The stacked input (rank ≥ 2, no `requires_grad`).
    pub input: String,
}

/// What happens to the accumulated gradients between the last backward pass of an
/// optimizer step and the step, in order; each applies to every gradient there is.
/// Definitions: PyTorch 2.15's `Tensor.mul_`, `torch.nn.utils.clip_grad_norm_` and
/// `clip_grad_value_`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GradTransform {
    /// g ← factor·g.
    Scale {
        /// The factor.
        factor: f64,
    },
    /// N = ‖(‖g₁‖₂, ‖g₂‖₂, …)‖₂ over every gradient, c = min(max_norm·(N + 10⁻⁶)⁻¹, 1)
    /// (the reciprocal, then the product), g ← c·g.
    ClipNorm {
        /// The largest total norm kept (> 0).
        max_norm: f64,
    },
    /// Every element clamped to [−clip_value, clip_value].
    ClipValue {
        /// The bound (> 0).
        clip_value: f64,
    },
    /// The gradient of `input` becomes `values` (flat, row-major, rounded once to the run
    /// dtype).
    Replace {
        /// An input with `requires_grad`.
        input: String,
        /// One value per element of the input.
        values: Vec<f64>,
    },
}

/// A slot of the optimizer's per-parameter state, named as in PyTorch's `state_dict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSlot {
    /// Adam/AdamW first moment m.
    ExpAvg,
    /// Adam/AdamW second moment v.
    ExpAvgSq,
    /// SGD momentum buffer b.
    MomentumBuffer,
}

impl StateSlot {
    /// The quantity suffix: `exp_avg`, `exp_avg_sq`, `momentum_buffer`.
    pub fn name(self) -> &'static str {
        match self {
            StateSlot::ExpAvg => "exp_avg",
            StateSlot::ExpAvgSq => "exp_avg_sq",
            StateSlot::MomentumBuffer => "momentum_buffer",
        }
    }
}

/// What a case reports: parsed from `loss`, `<name>`, `<input>.grad`, `<input>.after_step`,
/// `<input>.exp_avg`, `<input>.exp_avg_sq`, `<input>.momentum_buffer`.
///
/// With `optimizer_steps` n > 1 the case is a training loop of n iterations (forward,
/// loss, backward, optimizer step) and every quantity is recorded at each iteration and
/// stacked along a new leading dimension of length n (row k: iteration k + 1; a state slot
/// and `after_step` after that iteration's update, a gradient before it). With n = 1 the
/// quantities have their own shapes. With `accumulate` k > 1 an iteration runs k forward
/// and backward passes: the loss and forward values are recorded at each and stacked along
/// a micro-step dimension of length k (inside the iterations' one), and a gradient is the
/// one the step uses (the sum over the micro-steps, then the [`GradTransform`]s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quantity {
    /// The scalar loss.
    Loss,
    /// Forward values of a named tensor.
    Value(String),
    /// Gradient of an input with `requires_grad`.
    Grad(String),
    /// Value of an input with `requires_grad` after the optimizer step.
    AfterStep(String),
    /// The optimizer's state for an input with `requires_grad`, after the step.
    State(String, StateSlot),
}

impl Quantity {
    /// Parses a quantity name.
    ///
    /// # Errors
    /// For an unknown suffix.
    pub fn parse(q: &str) -> Result<Self> {
        Ok(match q.split_once('.') {
            None if q == "loss" => Quantity::Loss,
            None => Quantity::Value(q.to_string()),
            Some((n, "grad")) => Quantity::Grad(n.to_string()),
            Some((n, "after_step")) => Quantity::AfterStep(n.to_string()),
            Some((n, "exp_avg")) => Quantity::State(n.to_string(), StateSlot::ExpAvg),
            Some((n, "exp_avg_sq")) => Quantity::State(n.to_string(), StateSlot::ExpAvgSq),
            Some((n, "momentum_buffer")) => {
                Quantity::State(n.to_string(), StateSlot::MomentumBuffer)
            }
            Some((_, s)) => bail!("quantity {q:?}: unknown suffix {s:?}"),
        })
    }
}
