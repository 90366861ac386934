//! The run specification: one training run, as resolved by the workflow from `config.yaml`.
//!
//! The workflow writes it as JSON (`scripts/parity/plan/runspec.py`, `runner_spec`); every
//! field is explicit there, so nothing here has a default. Unknown fields are an error.
//! The model families are [`crate::model`]'s and the deliberate faults [`crate::fault`]'s,
//! both re-exported here; every check of what a runner may be asked to run stays here
//! ([`RunSpec::from_json`]), so both runners refuse the same things.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

pub use crate::fault::Fault;
pub use crate::model::{
    Activation, ConvImpl, GeluImpl, LayerNormImpl, Model, ParamSpec, SoftmaxImpl,
};

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

/// Where the AdamW update comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdamWImpl {
    /// `candle_nn::AdamW` itself (candle-parity).
    Candle,
    /// The hand-written copy of candle-nn 0.11.0's `AdamW::step` in candle-parity, which also
    /// exposes `exp_avg`/`exp_avg_sq` and can compute bias correction in float32.
    Manual,
    /// `burn::optim::AdamW` itself (burn-parity); its bias-correction factors are float32.
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

/// The optimizer and every hyperparameter, explicitly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Optimizer {
    /// Plain gradient descent θ ← θ − lr·g (candle-nn's SGD has no momentum).
    Sgd {
        /// Learning rate.
        lr: f64,
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
        /// Which implementation steps.
        implementation: AdamWImpl,
        /// Type of the bias-correction factors (only `f64` with the candle implementation,
        /// only `f32` with burn's).
        bias_correction: FactorType,
    },
    /// Adam (Kingma & Ba 2015) with L2 weight decay folded into the gradient,
    /// g ← g + λθ, as `torch.optim.Adam` does it; no decay at all when λ is 0. Each runner
    /// uses its framework's own Adam (burn's `AdamConfig`); candle-nn 0.11.0 has none, so
    /// candle-parity refuses it.
    Adam {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// L2 penalty λ added to the gradient (coupled, unlike AdamW's).
        weight_decay: f64,
    },
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
    /// safetensors file with the parameters (state_dict keys) and the data: `x`
    /// `[batches, batch, …input]` float32 and `y` `[batches, batch, outputs]` float32 (MSE)
    /// or `[batches, batch]` int64 (cross-entropy).
    pub fixture: PathBuf,
    /// Run dtype.
    pub dtype: FloatType,
    /// Device.
    pub device: DeviceKind,
    /// Number of optimizer steps; at least 1.
    pub steps: u32,
    /// Model.
    pub model: Model,
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
}

impl RunSpec {
    /// Parses and checks a spec.
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or values that cannot run (a parameter list other
    /// than the model family's, no steps, a record
    /// interval of 0, float32 factors with candle's own AdamW or float64 factors with burn's,
    /// a `Record::tensors` name that is not a parameter, a [`Fault`] the run cannot have).
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
        let expected = self.model.params();
        if expected != self.params {
            bail!(
                "the spec's parameters {:?} differ from what the {:?} family declares {:?}",
                self.params,
                self.model,
                expected
            );
        }
        if self.steps == 0 {
            bail!("steps must be at least 1");
        }
        if let Model::Transformer { d_model, heads, .. } = self.model {
            if heads == 0 || d_model % heads != 0 {
                bail!("transformer: d_model {d_model} is not a multiple of heads {heads}");
            }
            if self.loss != Loss::CrossEntropy {
                bail!("transformer: the loss is the next-token cross-entropy (\"cross_entropy\")");
            }
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
        if let Some(names) = &self.record.tensors {
            for n in names {
                if !self.params.iter().any(|p| &p.name == n) {
                    bail!("record.tensors names {n:?}, which is not a parameter of this model");
                }
            }
        }
        Ok(())
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
            Fault::TransposedWeight => {
                let square = match &self.model {
                    Model::Mlp { sizes, .. } => sizes.windows(2).any(|w| w[0] == w[1]),
                    Model::Cnn1d { .. } | Model::Transformer { .. } => false,
                };
                if !square {
                    bail!("fault TransposedWeight needs an MLP with a square weight (two equal consecutive sizes)");
                }
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
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "experiment": "a3_adamw", "run": "candle", "fixture": "f.safetensors",
            "dtype": "f32", "device": "cpu", "steps": 3,
            "model": {"family": "mlp", "sizes": [8, 16, 4], "activation": "relu"},
            "loss": "mse",
            "optimizer": {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                           "weight_decay": 0.01, "implementation": "candle", "bias_correction": "f64"},
            "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
            "params": [{"name": "fc1.weight", "shape": [16, 8]}, {"name": "fc1.bias", "shape": [16]},
                       {"name": "fc2.weight", "shape": [4, 16]}, {"name": "fc2.bias", "shape": [4]}],
            "fault": {"kind": "none"}
        })
    }

    #[test]
    fn parses_a_full_spec() {
        let spec = RunSpec::from_json(&base().to_string()).unwrap();
        assert_eq!(spec.dtype, FloatType::F32);
        assert!(matches!(spec.model, Model::Mlp { ref sizes, .. } if sizes == &[8, 16, 4]));
        assert!(spec.records_step(0) && spec.records_step(3));
    }

    #[test]
    fn unknown_field_is_refused() {
        let mut v = base();
        v["optimizer"]["momentum"] = serde_json::json!(0.9);
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("momentum"), "{err:#}");
    }

    #[test]
    fn a_parameter_list_other_than_the_family_s_is_refused() {
        let mut v = base();
        v["params"][0]["name"] = serde_json::json!("fc1.kernel");
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("differ from what"), "{err:#}");
    }

    #[test]
    fn f32_factors_need_the_manual_adamw() {
        let mut v = base();
        v["optimizer"]["bias_correction"] = serde_json::json!("f32");
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("manual"), "{err:#}");
    }

    #[test]
    fn burn_adamw_needs_f32_factors() {
        let mut v = base();
        v["optimizer"]["implementation"] = serde_json::json!("burn");
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("float32 only"), "{err:#}");
        v["optimizer"]["bias_correction"] = serde_json::json!("f32");
        RunSpec::from_json(&v.to_string()).unwrap();
    }

    #[test]
    fn the_fault_is_explicit_and_checked() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("fault");
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("fault"), "{err:#}");

        let mut v = base();
        v["fault"] = serde_json::json!({"kind": "skip_update", "step": 2});
        let spec = RunSpec::from_json(&v.to_string()).unwrap();
        assert!(spec.fault.skips(2) && !spec.fault.skips(1));
        v["fault"] = serde_json::json!({"kind": "skip_update", "step": 0});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("from 1"), "{err:#}");
        v["fault"] = serde_json::json!({"kind": "mse_sum", "step": 1});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("takes no step"), "{err:#}");
        v["fault"] = serde_json::json!({"kind": "mse_sum", "steps": 1});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("steps"), "{err:#}");
        v["fault"] = serde_json::json!({"kind": "skip_update"});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("needs its step"), "{err:#}");

        v["fault"] = serde_json::json!({"kind": "eps_in_sqrt"});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("manual"), "{err:#}");
        v["optimizer"]["implementation"] = serde_json::json!("manual");
        RunSpec::from_json(&v.to_string()).unwrap();

        v["fault"] = serde_json::json!({"kind": "transposed_weight"});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("square"), "{err:#}");
        v["model"]["sizes"] = serde_json::json!([8, 16, 16, 4]);
        v["params"] = serde_json::json!([
            {"name": "fc1.weight", "shape": [16, 8]}, {"name": "fc1.bias", "shape": [16]},
            {"name": "fc2.weight", "shape": [16, 16]}, {"name": "fc2.bias", "shape": [16]},
            {"name": "fc3.weight", "shape": [4, 16]}, {"name": "fc3.bias", "shape": [4]}
        ]);
        RunSpec::from_json(&v.to_string()).unwrap();
    }

    #[test]
    fn adam_is_explicit_and_has_no_implementation_field() {
        let mut v = base();
        v["optimizer"] = serde_json::json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999],
                                            "eps": 1e-8, "weight_decay": 0.0});
        let spec = RunSpec::from_json(&v.to_string()).unwrap();
        assert!(
            matches!(spec.optimizer, Optimizer::Adam { weight_decay, .. } if weight_decay == 0.0)
        );
        v["optimizer"]["implementation"] = serde_json::json!("burn");
        assert!(RunSpec::from_json(&v.to_string()).is_err());
        v["optimizer"] = serde_json::json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999],
                                            "weight_decay": 0.0});
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("eps"), "{err:#}");
    }

    #[test]
    fn record_every_thins_the_steps_but_keeps_first_and_last() {
        let mut v = base();
        v["steps"] = serde_json::json!(10);
        v["record"]["every"] = serde_json::json!(4);
        let spec = RunSpec::from_json(&v.to_string()).unwrap();
        let kept: Vec<u32> = (0..=10).filter(|&s| spec.records_step(s)).collect();
        assert_eq!(kept, vec![0, 4, 8, 10]);
    }
}
