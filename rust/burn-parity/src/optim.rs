//! burn's optimizers, configured from the run spec with every hyperparameter explicit.
//!
//! burn-optim 0.22's defaults differ from PyTorch's (ε 1e-5 for Adam and AdamW, AdamW weight
//! decay 1e-4, SGD momentum dampening 0.1 when momentum is enabled), so nothing is left to
//! them; [`defaults_json`] prints them, read from burn's config types.
//!
//! What stays burn's by construction, and is part of what the workflow measures:
//!
//! * β₁, β₂, ε and the weight decay are `f32` fields of burn's configs, so they are rounded
//!   to float32 (0.9 becomes 0.89999997615814…); a float64 run multiplies by those values.
//! * The bias-correction factors are computed in float32 from those betas
//!   (burn-optim 0.22 `adam.rs` `AdaptiveMomentum::transform`: `(1 − β₂ᵗ)^½ / (1 − β₁ᵗ)`
//!   with ε scaled by `(1 − β₂ᵗ)^½`; `adamw.rs` `AdaptiveMomentumW::transform`: `m / (1 − β₁ᵗ)`
//!   and `v / (1 − β₂ᵗ)`), whatever the tensors' float type.
//! * The learning rate is an `f64` argument of `ModuleOptimizer::step`.
//!
//! Adam's and AdamW's moments live inside burn's `ModuleOptimizer`, per parameter id; they are
//! read for the `exp_avg:`/`exp_avg_sq:` records and replaced for a replay through burn's
//! optimizer record ([`crate::moments`], [`Stepper::moments`], [`Stepper::start_from`]).

use anyhow::{bail, Result};
use burn::module::{Module, ParamGroup, ParamId};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer, SgdConfig};
use parity_common::probe_spec::ProbeOptimizer;
use parity_common::replay::Moments;
use parity_common::spec::{AdamWImpl, Clip, FactorType, FloatType, Optimizer, RunSpec};

use crate::load::ParamInfo;
use crate::moments::{self, ParamMoments};

/// The optimizer of one run and the learning rate of its next step (each group's).
pub struct Stepper {
    optim: ModuleOptimizer,
    lr: ModuleLearningRate,
    name: &'static str,
}

/// burn's config of an optimizer, every hyperparameter explicit, and its gradient clipping
/// (see [`Built::of`]).
struct Built {
    config: Config,
    clipping: Option<GradientClippingConfig>,
}

/// One of burn's optimizer configs.
enum Config {
    Sgd(SgdConfig),
    Adam(AdamConfig),
    AdamW(AdamWConfig),
}

impl Built {
    /// burn's config of the optimizer `spec` names, with weight decay `weight_decay` (a
    /// group's) and burn's gradient clipping `clipping`:
    ///
    /// * `sgd`: `SgdConfig` with `MomentumConfig { momentum, dampening, nesterov }` when the
    ///   momentum is not 0 (none otherwise: PyTorch then keeps no buffer and ignores
    ///   dampening and nesterov), L2 `WeightDecayConfig { penalty }` when λ is not 0. burn
    ///   holds the momentum as `f32` (rounded) and the dampening as `f64`;
    /// * `adam`: `AdamConfig` with β₁, β₂, ε and AMSGrad from the spec, and L2 weight decay
    ///   `WeightDecayConfig { penalty }` when λ is above 0 (none at 0, as `torch.optim.Adam`
    ///   adds nothing then);
    /// * `adamw`: `AdamWConfig` with β₁, β₂, ε, AMSGrad and the decoupled weight decay from
    ///   the spec, cautious weight decay off.
    ///
    /// # Errors
    /// An Adam or AdamW that is not burn's own ([`check_burns`]).
    fn of(
        spec: &Optimizer,
        weight_decay: f64,
        clipping: Option<GradientClippingConfig>,
    ) -> Result<Self> {
        let config = match *spec {
            Optimizer::Sgd {
                momentum,
                dampening,
                nesterov,
                ..
            } => Config::Sgd(
                SgdConfig::new()
                    .with_momentum((momentum != 0.0).then_some(MomentumConfig {
                        momentum,
                        dampening,
                        nesterov,
                    }))
                    .with_weight_decay(
                        (weight_decay != 0.0).then(|| WeightDecayConfig::new(weight_decay as f32)),
                    )
                    .with_gradient_clipping(clipping.clone()),
            ),
            Optimizer::Adam {
                betas,
                eps,
                amsgrad,
                implementation,
                bias_correction,
                ..
            } => {
                check_burns(implementation, bias_correction)?;
                Config::Adam(
                    AdamConfig::new()
                        .with_beta_1(betas[0] as f32)
                        .with_beta_2(betas[1] as f32)
                        .with_epsilon(eps as f32)
                        .with_amsgrad(amsgrad)
                        .with_weight_decay(
                            (weight_decay > 0.0)
                                .then(|| WeightDecayConfig::new(weight_decay as f32)),
                        )
                        .with_grad_clipping(clipping.clone()),
                )
            }
            Optimizer::Adamw {
                betas,
                eps,
                amsgrad,
                implementation,
                bias_correction,
                ..
            } => {
                check_burns(implementation, bias_correction)?;
                Config::AdamW(
                    AdamWConfig::new()
                        .with_beta_1(betas[0] as f32)
                        .with_beta_2(betas[1] as f32)
                        .with_epsilon(eps as f32)
                        .with_weight_decay(weight_decay as f32)
                        .with_cautious_weight_decay(false)
                        .with_amsgrad(amsgrad)
                        .with_grad_clipping(clipping.clone()),
                )
            }
        };
        Ok(Built { config, clipping })
    }

    /// burn's type that steps.
    fn name(&self) -> &'static str {
        match self.config {
            Config::Sgd(_) => "burn::optim::Sgd",
            Config::Adam(_) => "burn::optim::Adam",
            Config::AdamW(_) => "burn::optim::AdamW",
        }
    }

    /// `config.init()`: the optimizer of the whole module, with the config's clipping.
    fn init(&self) -> ModuleOptimizer {
        match &self.config {
            Config::Sgd(c) => c.init(),
            Config::Adam(c) => c.init(),
            Config::AdamW(c) => c.init(),
        }
    }

    /// `optim.with_group(group, config.build(), clipping)`: this config's optimizer for the
    /// parameters of `group` (`build()` leaves the clipping out, so it is passed along).
    fn add_to(&self, optim: ModuleOptimizer, group: ParamGroup) -> ModuleOptimizer {
        let clipping = self.clipping.as_ref().map(GradientClippingConfig::init);
        match &self.config {
            Config::Sgd(c) => optim.with_group(group, c.build(), clipping),
            Config::Adam(c) => optim.with_group(group, c.build(), clipping),
            Config::AdamW(c) => optim.with_group(group, c.build(), clipping),
        }
    }
}

impl Stepper {
    /// burn's optimizer named by `spec` over every parameter ([`Built::of`], no clipping),
    /// stepping with the spec's learning rate.
    ///
    /// `want_moments` asks for [`Stepper::moments`] to be readable (Adam and AdamW only).
    ///
    /// # Errors
    /// When `want_moments` is set for SGD (it keeps no moments), or for an AdamW that is not
    /// burn's own (`implementation` other than `burn`, or float64 bias-correction factors).
    pub fn new(spec: &Optimizer, want_moments: bool) -> Result<Self> {
        if want_moments && matches!(spec, Optimizer::Sgd { .. }) {
            bail!("SGD keeps no moments to record (exp_avg/exp_avg_sq exist for adam and adamw)");
        }
        let built = Built::of(spec, spec.weight_decay(), None)?;
        Ok(Stepper {
            optim: built.init(),
            lr: spec.lr().into(),
            name: built.name(),
        })
    }

    /// The optimizer of a training run, as a burn user configures it: [`Stepper::new`]
    /// without a training loop; with one, per parameter group (`groups`: each group's
    /// parameter ids, the loop's groups in order) burn's optimizer with the group's weight
    /// decay, the last group's through `config.init()` (burn's base, matching every
    /// parameter) and each other's through `ModuleOptimizer::with_group`, all with burn's
    /// clipping where the loop's is burn's (value clipping, and
    /// [`Clip::NormPerParameter`]; PyTorch's total-norm clipping is composed outside the
    /// optimizer, [`crate::clip`]). The learning rates are set per step
    /// ([`Stepper::set_learning_rate`]).
    ///
    /// # Errors
    /// As [`Stepper::new`].
    pub fn for_run(spec: &RunSpec, groups: &[Vec<ParamId>], want_moments: bool) -> Result<Self> {
        let Some(l) = &spec.training_loop else {
            return Self::new(&spec.optimizer, want_moments);
        };
        if want_moments && matches!(spec.optimizer, Optimizer::Sgd { .. }) {
            bail!("SGD keeps no moments to record (exp_avg/exp_avg_sq exist for adam and adamw)");
        }
        let clipping = match l.clip {
            Some(Clip::Value(v)) => Some(GradientClippingConfig::Value(v as f32)),
            Some(Clip::NormPerParameter(v)) => Some(GradientClippingConfig::Norm(v as f32)),
            Some(Clip::Norm(_)) | None => None,
        };
        let built = l
            .groups
            .iter()
            .map(|g| Built::of(&spec.optimizer, g.weight_decay, clipping.clone()))
            .collect::<Result<Vec<_>>>()?;
        let (base, rest) = built.split_last().expect("a loop has a group");
        let mut optim = base.init();
        for (b, ids) in rest.iter().zip(groups) {
            optim = b.add_to(optim, ParamGroup::from_ids(ids.clone()));
        }
        Ok(Stepper {
            optim,
            lr: spec.optimizer.lr().into(),
            name: base.name(),
        })
    }

    /// The learning rate of the next step, per parameter (burn's `ModuleLearningRate`, as a
    /// `ModuleLrScheduler::step` returns it).
    pub fn set_learning_rate(&mut self, lr: ModuleLearningRate) {
        self.lr = lr;
    }

    /// The learning rate the next step gives parameter `id`.
    pub fn learning_rate(&self, id: ParamId) -> f64 {
        self.lr.lr_from_param(id, None)
    }

    /// burn's optimizer for a probe, every hyperparameter from the probe:
    ///
    /// * `sgd`: `SgdConfig` with `MomentumConfig { momentum, dampening, nesterov }` when the
    ///   momentum is not 0 (none otherwise: PyTorch then keeps no buffer and ignores
    ///   dampening and nesterov), L2 `WeightDecayConfig { penalty }` when λ is not 0, no
    ///   clipping. burn holds the momentum as `f32` (rounded) and the dampening as `f64`.
    /// * `adam`: as [`Stepper::new`] (L2 weight decay, AMSGrad off).
    /// * `adamw`: burn's own AdamW (float32 bias-correction factors), as [`Stepper::new`].
    ///
    /// # Errors
    /// None in practice (kept for the signature of [`Stepper::new`], which it shares).
    pub fn for_probe(spec: &ProbeOptimizer) -> Result<Self> {
        let spec = match *spec {
            ProbeOptimizer::Sgd {
                lr,
                momentum,
                dampening,
                nesterov,
                weight_decay,
            } => Optimizer::Sgd {
                lr,
                momentum,
                dampening,
                nesterov,
                weight_decay,
            },
            ProbeOptimizer::Adam {
                lr,
                betas,
                eps,
                weight_decay,
            } => Optimizer::Adam {
                lr,
                betas,
                eps,
                weight_decay,
                amsgrad: false,
                implementation: AdamWImpl::Burn,
                bias_correction: FactorType::F32,
            },
            ProbeOptimizer::Adamw {
                lr,
                betas,
                eps,
                weight_decay,
            } => Optimizer::Adamw {
                lr,
                betas,
                eps,
                weight_decay,
                amsgrad: false,
                implementation: AdamWImpl::Burn,
                bias_correction: FactorType::F32,
            },
        };
        Self::new(&spec, false)
    }

    /// burn's type that steps (`burn::optim::Sgd`, `burn::optim::Adam`,
    /// `burn::optim::AdamW`), for the trace's provenance.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `optim.step(lr, module, grads)`: one update of every parameter of `module` (a probe's
    /// leaves, or a port through [`crate::net::NetOptimizer`]) that has a gradient.
    pub fn step_module<M: Module>(&mut self, module: M, grads: GradientsParams) -> M {
        self.optim.step(self.lr.clone(), module, grads)
    }

    /// Whether burn's optimizer keeps moments (Adam, AdamW), as opposed to stateless SGD.
    pub fn has_moments(&self) -> bool {
        self.name != "burn::optim::Sgd"
    }

    /// The moments burn's Adam/AdamW holds for each of `params` (the port's, state_dict order),
    /// in PyTorch layout and the run dtype `ty`, with burn's step count (see [`moments::read`]).
    ///
    /// # Errors
    /// For SGD, before the first step, or when burn's record cannot be read.
    pub fn moments(&self, params: &[ParamInfo], ty: FloatType) -> Result<Vec<ParamMoments>> {
        if !self.has_moments() {
            bail!("{} keeps no moments", self.name);
        }
        moments::read(&self.optim, params, ty)
    }

    /// SGD's momentum buffer for `p` (PyTorch's `momentum_buffer`: burn's `velocity`), in
    /// the run dtype `ty` (see [`moments::read_velocity`]).
    ///
    /// # Errors
    /// For Adam/AdamW, for SGD without momentum or before the parameter's first step, or
    /// when burn's record cannot be read.
    pub fn momentum_buffer(&self, p: &ParamInfo, ty: FloatType) -> Result<crate::device::Host> {
        if self.has_moments() {
            bail!("{} keeps no momentum buffer", self.name);
        }
        moments::read_velocity(&self.optim, p, ty)
    }

    /// Starts burn's Adam/AdamW from the given moments and step count, so that the next
    /// [`Stepper::step`] is step `steps_taken + 1` with that step's bias correction (see
    /// [`moments::load`]). Returns how it was started, for the `replay_note`.
    ///
    /// With `steps_taken` 0 and all-zero moments the state is left empty: burn's own first
    /// step (which starts from no state, `m = (1 − β₁)·g`) is the same recursion from zero
    /// moments, and keeps the sign of a zero as `train` does.
    ///
    /// # Errors
    /// For SGD, or as [`moments::load`].
    pub fn start_from(
        &mut self,
        params: &[ParamInfo],
        given: &Moments,
        ty: FloatType,
    ) -> Result<String> {
        if !self.has_moments() {
            bail!("{} keeps no moments to start from", self.name);
        }
        let zero = given
            .exp_avg
            .iter()
            .chain(&given.exp_avg_sq)
            .all(|t| t.values.iter().all(|&v| v == 0.0));
        if given.steps_taken == 0 && zero {
            return Ok(format!(
                "{}: no state loaded (step 1 from zero moments is burn's own first step)",
                self.name
            ));
        }
        let optim = std::mem::replace(&mut self.optim, SgdConfig::new().init());
        self.optim = moments::load(optim, params, given, ty)?;
        Ok(format!(
            "{}: ModuleOptimizer::load_record of a burnpack OptimizerRecord holding \
             moment_1 = exp_avg, moment_2 = exp_avg_sq (burn layout) and time = {} per \
             parameter, read back exactly before the step",
            self.name, given.steps_taken
        ))
    }
}

/// Refuses an Adam or AdamW that is not burn's own (another implementation, or float64
/// bias-correction factors).
fn check_burns(implementation: AdamWImpl, bias_correction: FactorType) -> Result<()> {
    if implementation != AdamWImpl::Burn || bias_correction != FactorType::F32 {
        bail!("burn-parity runs burn's own Adam and AdamW (implementation \"burn\", bias_correction \"f32\"), not {implementation:?} with {bias_correction:?} factors");
    }
    Ok(())
}

/// burn's optimizer defaults as JSON, serialised from the config types themselves
/// (`AdamConfig::new()`, `AdamWConfig::new()`, `SgdConfig::new()`, `MomentumConfig::new()`):
/// `{"burn_version", "Adam": {"source", "config"}, "AdamW": …, "SGD": {…, "momentum_config"},
/// "lr"}`. No config holds a learning rate; `lr` says so.
///
/// # Errors
/// Only if serialisation fails.
pub fn defaults_json() -> Result<serde_json::Value> {
    Ok(serde_json::json!({
        "burn_version": crate::BURN_VERSION,
        "Adam": {
            "source": "burn::optim::AdamConfig::new()",
            "config": serde_json::to_value(AdamConfig::new())?,
        },
        "AdamW": {
            "source": "burn::optim::AdamWConfig::new()",
            "config": serde_json::to_value(AdamWConfig::new())?,
        },
        "SGD": {
            "source": "burn::optim::SgdConfig::new()",
            "config": serde_json::to_value(SgdConfig::new())?,
            "momentum_config": serde_json::to_value(MomentumConfig::new())?,
        },
        "lr": "required: an argument of ModuleOptimizer::step, held by no config",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_come_from_burn_and_differ_from_pytorch() {
        let d = defaults_json().unwrap();
        // Read back as burn stores them (f32), not compared with typed-in f64 literals.
        let eps = d["Adam"]["config"]["epsilon"].as_f64().unwrap() as f32;
        assert_eq!(eps, 1e-5f32, "burn's Adam epsilon is not PyTorch's 1e-8");
        let wd = d["AdamW"]["config"]["weight_decay"].as_f64().unwrap() as f32;
        assert_eq!(
            wd, 1e-4f32,
            "burn's AdamW weight decay is not PyTorch's 0.01"
        );
        assert!(d["SGD"]["config"]["momentum"].is_null());
    }

    #[test]
    fn sgd_moments_and_foreign_adamw_are_refused() {
        let sgd = Optimizer::Sgd {
            lr: 0.1,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        };
        let err = Stepper::new(&sgd, true).err().unwrap();
        assert!(err.to_string().contains("SGD keeps no moments"), "{err:#}");
        let adam = Optimizer::Adam {
            lr: 0.01,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            implementation: AdamWImpl::Burn,
            bias_correction: FactorType::F32,
        };
        assert!(Stepper::new(&adam, true).unwrap().has_moments());
        let candle = Optimizer::Adamw {
            lr: 0.01,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.01,
            amsgrad: false,
            implementation: AdamWImpl::Candle,
            bias_correction: FactorType::F64,
        };
        let err = Stepper::new(&candle, false).err().unwrap();
        assert!(
            err.to_string().contains("burn's own Adam and AdamW"),
            "{err:#}"
        );
    }
}
