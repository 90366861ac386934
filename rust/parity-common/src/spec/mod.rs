//! The run specification: one training run, as resolved by the workflow from `config.yaml`.
//!
//! The workflow writes it as JSON (`scripts/parity/plan/runspec.py`, `runner_spec`); every
//! field is explicit there, so nothing here has a default. Unknown fields are an error.
//! The model is [`crate::model`]'s and the deliberate faults [`crate::fault`]'s, both
//! re-exported here; every check of what a runner may be asked to run that needs no port
//! stays here ([`RunSpec::from_json`]), so both runners refuse the same things; what only a
//! port knows (its config, the names it asks for) the port checks when it is built.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

pub use crate::fault::Fault;
pub use crate::model::{InputKind, ModelSpec, ParamSpec, TargetKind, OWN};

/// Floating-point type of a run. `F64` runs start from the fixture's float32 values widened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FloatType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
}

impl FloatType {
    /// The short name used in paths and metadata (`f32`, `f64`).
    pub fn name(self) -> &'static str {
        match self {
            FloatType::F32 => "f32",
            FloatType::F64 => "f64",
        }
    }
}

/// The workflow's device axis. `Metal` is Apple's GPU (PyTorch calls it `mps`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// The first NVIDIA GPU (ordinal 0).
    Cuda,
    /// The first Apple GPU (ordinal 0).
    Metal,
}

impl DeviceKind {
    /// The short name used in paths and metadata.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Metal => "metal",
        }
    }
}

/// Scalar training loss, averaged over the batch like PyTorch's default `reduction="mean"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    /// mean((output − target)²) over every element.
    Mse,
    /// mean over samples of −log softmax(output)[label]; labels are int64 class indices.
    CrossEntropy,
}

/// Where an Adam or AdamW update comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdamWImpl {
    /// `candle_nn::AdamW` itself (candle-parity).
    Candle,
    /// The hand-written copy of candle-nn 0.11.0's `AdamW::step` in candle-parity, which also
    /// exposes `exp_avg`/`exp_avg_sq` and can compute bias correction in float32.
    Manual,
    /// The porter's hand-written PyTorch-style Adam/AdamW (candle-parity's recipe of what
    /// candle-nn lacks: per-parameter step counts, L2 or decoupled decay, amsgrad).
    Recipe,
    /// `burn::optim::Adam`/`AdamW` itself (burn-parity); its bias-correction factors are
    /// float32.
    Burn,
}

/// Type in which the bias-correction factors `1/(1−β₁ᵗ)` and `1/(1−β₂ᵗ)` are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FactorType {
    /// float64, as candle-nn and PyTorch do.
    F64,
    /// float32, as burn does (burn-parity, and candle-parity's ablation).
    F32,
}

/// The optimizer and every hyperparameter, explicitly (the learning rate and weight decay
/// are each group's where the run has [`Loop::groups`]).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Optimizer {
    /// PyTorch's SGD (`torch.optim.SGD`): g ← g + λθ (L2), with momentum μ the buffer
    /// b ← g on the first step and μb + (1 − τ)g after, g ← b (or g + μb with Nesterov),
    /// θ ← θ − lr·g. candle-nn's SGD has only θ ← θ − lr·g.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum μ (0: none).
        momentum: f64,
        /// Dampening τ of the momentum.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 penalty λ added to the gradient.
        weight_decay: f64,
    },
    /// Decoupled weight decay Adam (Loshchilov & Hutter 2019), as in candle-nn 0.11.0
    /// `AdamW::step` and PyTorch `torch.optim.AdamW`.
    Adamw {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// Decoupled decay λ: θ ← θ·(1 − lr·λ) before the Adam update.
        weight_decay: f64,
        /// The maximum of the raw second moments so far in the denominator.
        amsgrad: bool,
        /// Which implementation steps.
        implementation: AdamWImpl,
        /// Type of the bias-correction factors (only `f64` with the candle implementation,
        /// only `f32` with burn's).
        bias_correction: FactorType,
    },
    /// Adam (Kingma & Ba 2015) with L2 weight decay folded into the gradient,
    /// g ← g + λθ, as `torch.optim.Adam` does it; no decay at all when λ is 0. burn-parity
    /// runs burn's own; candle-nn 0.11.0 has none, so candle-parity runs its recipe.
    Adam {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// L2 penalty λ added to the gradient (coupled, unlike AdamW's).
        weight_decay: f64,
        /// The maximum of the raw second moments so far in the denominator.
        amsgrad: bool,
        /// Which implementation steps (`recipe` or `burn`).
        implementation: AdamWImpl,
        /// Type of the bias-correction factors.
        bias_correction: FactorType,
    },
}

impl Optimizer {
    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match *self {
            Optimizer::Sgd { lr, .. }
            | Optimizer::Adamw { lr, .. }
            | Optimizer::Adam { lr, .. } => lr,
        }
    }

    /// The weight decay (L2 for SGD and Adam, decoupled for AdamW).
    pub fn weight_decay(&self) -> f64 {
        match *self {
            Optimizer::Sgd { weight_decay, .. }
            | Optimizer::Adamw { weight_decay, .. }
            | Optimizer::Adam { weight_decay, .. } => weight_decay,
        }
    }
}

/// The training loop beyond the optimizer's update (docs/loop.md), `None` in a run without
/// one. Its groups hold every parameter once.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loop {
    /// The learning-rate schedule.
    pub schedule: Option<crate::schedule::Schedule>,
    /// Gradient clipping after the backward pass.
    pub clip: Option<Clip>,
    /// The optimizer's parameter groups, each its own optimizer in candle.
    pub groups: Vec<Group>,
    /// Micro-batches per optimizer step.
    pub accumulate: Accumulate,
}

/// One parameter group.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Its parameters by state_dict key, in state_dict order.
    pub params: Vec<String>,
    /// Its learning rate (a schedule's base).
    pub lr: f64,
    /// Its weight decay.
    pub weight_decay: f64,
}

/// Gradient clipping.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Clip {
    /// PyTorch's `clip_grad_norm_`: every gradient times min(max_norm / (total 2-norm +
    /// 1e-6), 1).
    Norm(f64),
    /// PyTorch's `clip_grad_value_`: each element clamped to [−value, value].
    Value(f64),
    /// burn's `GradientClipping::Norm(max_norm)`: each gradient times min(max_norm / (its
    /// own 2-norm + the dtype's smallest normal), 1), a norm per parameter where
    /// `clip_grad_norm_` takes one of all (burn-optim 0.22 `grad_clipping/base.rs`). burn's
    /// built-in, run as its users run it; no candle run has it.
    NormPerParameter(f64),
}

/// Gradient accumulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accumulate {
    /// Micro-batches per optimizer step, each a backward pass; step t's j-th uses batch
    /// ((t − 1)·k + j) mod batches.
    pub micro_batches: u32,
    /// Whether each micro-batch's loss is divided by their number (`mean`) or not (`sum`).
    pub reduction: Reduction,
}

/// How accumulated micro-batch losses combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    /// Each loss divided by the number of micro-batches, as a PyTorch user writes it.
    Mean,
    /// Summed (a port that forgot the division).
    Sum,
}

/// What each recorded step carries besides the parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Record every `every`-th step (and always step 0 and the last step); at least 1.
    pub every: u32,
    /// Parameters to record, by state_dict key; `None` records all.
    pub tensors: Option<Vec<String>>,
    /// Also record gradients (`grad:<name>`).
    pub grads: bool,
    /// Also record optimizer moments (`exp_avg:<name>`, `exp_avg_sq:<name>`).
    pub moments: bool,
}

/// One training run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Experiment key in the config.
    pub experiment: String,
    /// Run name within the experiment (`candle`, `candle_f32factors`, …).
    pub run: String,
    /// safetensors file with the parameters and buffers (state_dict keys, float32) and the
    /// data `x` and `y` (see [`InputKind`], [`TargetKind`]).
    pub fixture: PathBuf,
    /// Run dtype.
    pub dtype: FloatType,
    /// Device.
    pub device: DeviceKind,
    /// Number of optimizer steps; at least 1.
    pub steps: u32,
    /// Model.
    pub model: ModelSpec,
    /// Loss.
    pub loss: Loss,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Recording options.
    pub record: Record,
    /// Parameters in state_dict order.
    pub params: Vec<ParamSpec>,
    /// A deliberate fault, or `Fault::None` (see [`Fault`]).
    pub fault: Fault,
    /// The training loop's schedule, clipping, groups and accumulation, where the run has one.
    #[serde(rename = "loop")]
    pub training_loop: Option<Loop>,
}

impl RunSpec {
    /// Parses and checks a spec.
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or values that cannot run: a parameter listed
    /// twice, tied aliases, buffers or a rename table that do not fit the parameters, an
    /// input, target and loss that do not fit each other ([`RunSpec::check_model`]), no
    /// steps, a record interval of 0, float32 factors with candle's own AdamW or float64
    /// factors with burn's, a `Record::tensors` name that is not a parameter, a [`Fault`]
    /// the run cannot have.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: RunSpec = serde_json::from_str(text).context("parsing the run spec JSON")?;
        spec.check()?;
        Ok(spec)
    }

    /// Reads a spec from a file; see [`RunSpec::from_json`].
    ///
    /// # Errors
    /// As [`RunSpec::from_json`], or when the file cannot be read.
    pub fn from_path(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading run spec {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in run spec {}", path.display()))
    }

    fn check(&self) -> Result<()> {
        self.check_model()?;
        if self.steps == 0 {
            bail!("steps must be at least 1");
        }
        if self.record.every == 0 {
            bail!("record.every must be at least 1");
        }
        if let Optimizer::Adamw {
            implementation: AdamWImpl::Candle,
            bias_correction: FactorType::F32,
            ..
        } = self.optimizer
        {
            bail!("candle-nn's AdamW computes bias correction in float64 only; use implementation \"manual\" for float32 factors");
        }
        if let Optimizer::Adamw {
            implementation: AdamWImpl::Burn,
            bias_correction: FactorType::F64,
            ..
        } = self.optimizer
        {
            bail!("burn's AdamW computes its bias-correction factors in float32 only (bias_correction \"f32\")");
        }
        self.check_fault()?;
        if let Some(l) = &self.training_loop {
            self.check_loop(l)?;
        }
        if let Some(names) = &self.record.tensors {
            for n in names {
                if !self.params.iter().any(|p| &p.name == n) {
                    bail!("record.tensors names {n:?}, which is not a parameter of this model");
                }
            }
        }
        Ok(())
    }

    /// The checks of the model ([`ModelSpec`]) that need no port: its parameter names are
    /// distinct, each tied alias points at a parameter and is none itself, buffers are
    /// neither, every rename table entry names a parameter, alias or buffer, and the input,
    /// target and loss fit each other (token targets need token inputs and the
    /// cross-entropy, class labels the cross-entropy, float targets the MSE).
    fn check_model(&self) -> Result<()> {
        let m = &self.model;
        let mut names = std::collections::BTreeSet::new();
        for p in &self.params {
            if !names.insert(p.name.as_str()) {
                bail!("model: parameter {:?} is listed twice", p.name);
            }
        }
        for (alias, recorded) in &m.tied {
            if names.contains(alias.as_str()) {
                bail!("model: tied alias {alias:?} is also a parameter (a tied tensor is listed once, under its recorded name)");
            }
            if !names.contains(recorded.as_str()) {
                bail!(
                    "model: tied alias {alias:?} points at {recorded:?}, which is not a parameter"
                );
            }
        }
        for b in &m.buffers {
            if names.contains(b.name.as_str()) || m.tied.contains_key(&b.name) {
                bail!("model: buffer {:?} is also a parameter", b.name);
            }
        }
        for (rust, key) in &m.rename {
            let known = names.contains(key.as_str())
                || m.tied.contains_key(key)
                || m.buffers.iter().any(|b| &b.name == key);
            if !known {
                bail!("model: rename {rust:?} → {key:?}: {key:?} is not a parameter, tied alias or buffer");
            }
        }
        let needs = match m.target {
            TargetKind::Tokens | TargetKind::Classes => Loss::CrossEntropy,
            TargetKind::Float => Loss::Mse,
        };
        if self.loss != needs {
            bail!(
                "model: {:?} targets are trained on the loss {needs:?}, not {:?}",
                m.target,
                self.loss
            );
        }
        if m.target == TargetKind::Tokens && m.input != InputKind::Tokens {
            bail!("model: next-token targets need token inputs");
        }
        Ok(())
    }

    /// The loop's groups hold every parameter of the spec exactly once, and it has at least
    /// one micro-batch and a positive clipping bound.
    fn check_loop(&self, l: &Loop) -> Result<()> {
        let mut seen = std::collections::BTreeMap::new();
        for (i, g) in l.groups.iter().enumerate() {
            for p in &g.params {
                if let Some(j) = seen.insert(p.as_str(), i) {
                    bail!("loop: parameter {p:?} is in group {j} and group {i}");
                }
            }
        }
        if let Some(p) = self
            .params
            .iter()
            .find(|p| !seen.contains_key(p.name.as_str()))
        {
            bail!("loop: parameter {:?} is in no group", p.name);
        }
        if seen.len() != self.params.len() {
            bail!("loop: the groups name a tensor that is not a parameter");
        }
        if l.accumulate.micro_batches == 0 {
            bail!("loop: accumulate.micro_batches must be at least 1");
        }
        if let Some(Clip::Norm(v) | Clip::Value(v) | Clip::NormPerParameter(v)) = l.clip {
            if v.is_nan() || v <= 0.0 {
                bail!("loop: the clipping bound must be positive, not {v}");
            }
        }
        Ok(())
    }

    /// The parameter groups: the loop's, or one group of every parameter with the
    /// optimizer's learning rate and weight decay.
    pub fn groups(&self) -> Vec<Group> {
        match &self.training_loop {
            Some(l) => l.groups.clone(),
            None => vec![Group {
                params: self.params.iter().map(|p| p.name.clone()).collect(),
                lr: self.optimizer.lr(),
                weight_decay: self.optimizer.weight_decay(),
            }],
        }
    }

    /// Micro-batches per optimizer step (1 without a loop).
    pub fn micro_batches(&self) -> u32 {
        self.training_loop
            .as_ref()
            .map_or(1, |l| l.accumulate.micro_batches)
    }

    fn check_fault(&self) -> Result<()> {
        let manual = matches!(
            self.optimizer,
            Optimizer::Adamw {
                implementation: AdamWImpl::Manual,
                ..
            }
        );
        match self.fault {
            f if f.in_adamw() && !manual => {
                bail!("fault {f:?} is in the AdamW update; it needs implementation \"manual\"")
            }
            Fault::MseSum if self.loss != Loss::Mse => bail!("fault MseSum needs loss \"mse\""),
            f if f.in_model() && self.model.is_own() => {
                bail!("fault {f:?} acts in the forward pass, which only a built-in family's port applies")
            }
            Fault::SkipUpdate { step: 0 } => bail!("fault SkipUpdate: steps count from 1"),
            _ => {}
        }
        Ok(())
    }

    /// Whether step `step` is recorded: step 0, the last step, and every `record.every`-th.
    pub fn records_step(&self, step: u32) -> bool {
        step == 0 || step == self.steps || step.is_multiple_of(self.record.every)
    }

    /// Whether parameter `name` is recorded.
    pub fn records_tensor(&self, name: &str) -> bool {
        match &self.record.tensors {
            None => true,
            Some(names) => names.iter().any(|n| n == name),
        }
    }
}

#[cfg(test)]
mod tests;
