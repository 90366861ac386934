//! A deliberate fault in one run ([`Fault`]): the detection-power suite's way of breaking a
//! run on purpose, part of the run spec ([`crate::spec`] re-exports it; the checks of which
//! run may have which fault are [`crate::spec::RunSpec`]'s).

use serde::Deserialize;

/// A deliberate fault in one run, for measuring what the comparison detects (README,
/// "Detection power"; config `faults`). Every run that is not a fault instance says
/// `{"kind": "none"}` and is computed exactly as without this field.
///
/// Faults that an existing setting already expresses (a weight-decay or learning-rate
/// mismatch, `bias_correction: f32`, `conv_impl: conv1d`) are not repeated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "FaultJson")]
pub enum Fault {
    /// No fault.
    None,
    /// AdamW divides by √(v̂ + ε) instead of √v̂ + ε (needs the manual AdamW).
    EpsInSqrt,
    /// AdamW without bias correction: m̂ = m, v̂ = v (needs the manual AdamW).
    NoBiasCorrection,
    /// AdamW's step counter starts at 0: step t computes its bias-correction factors with
    /// exponent t − 1, so step 1 divides by 1 − β⁰ = 0 (needs the manual AdamW).
    StepFromZero,
    /// MSE summed over the elements instead of averaged (needs `Loss::Mse`).
    MseSum,
    /// Every square MLP weight `[n, n]` is used as `W` instead of `Wᵀ` (y = x·W + b).
    TransposedWeight,
    /// The optimizer step of step `step` is skipped: the parameters and the optimizer state
    /// stay as they were (as a gradient scaler does on an overflow).
    SkipUpdate {
        /// The skipped step, from 1; beyond the run's last step nothing is skipped (so a
        /// shortened run stays valid, and the comparison shows the fault never fired).
        step: u32,
    },
}

/// The JSON form of a [`Fault`]: `{"kind": "eps_in_sqrt"}`, `{"kind": "skip_update",
/// "step": 50}`. A struct of its own because serde's internally tagged enums accept unknown
/// fields beside a unit variant; this one refuses them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultJson {
    kind: FaultKind,
    step: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum FaultKind {
    None,
    EpsInSqrt,
    NoBiasCorrection,
    StepFromZero,
    MseSum,
    TransposedWeight,
    SkipUpdate,
}

impl TryFrom<FaultJson> for Fault {
    type Error = String;

    fn try_from(j: FaultJson) -> std::result::Result<Self, String> {
        let fault = match j.kind {
            FaultKind::None => Fault::None,
            FaultKind::EpsInSqrt => Fault::EpsInSqrt,
            FaultKind::NoBiasCorrection => Fault::NoBiasCorrection,
            FaultKind::StepFromZero => Fault::StepFromZero,
            FaultKind::MseSum => Fault::MseSum,
            FaultKind::TransposedWeight => Fault::TransposedWeight,
            FaultKind::SkipUpdate => Fault::SkipUpdate {
                step: j.step.ok_or("fault skip_update needs its step")?,
            },
        };
        if j.step.is_some() && !matches!(fault, Fault::SkipUpdate { .. }) {
            return Err(format!("fault {fault:?} takes no step"));
        }
        Ok(fault)
    }
}

impl Fault {
    /// Whether this fault lives in the AdamW update (and so needs `AdamWImpl::Manual`).
    pub fn in_adamw(self) -> bool {
        matches!(
            self,
            Fault::EpsInSqrt | Fault::NoBiasCorrection | Fault::StepFromZero
        )
    }

    /// Whether this fault acts in the model's forward pass, where only a built-in family's
    /// port can apply it ([`crate::spec::ModelSpec::port_config`] hands it over).
    pub fn in_model(self) -> bool {
        matches!(self, Fault::TransposedWeight)
    }

    /// Its `kind` in the JSON form (`transposed_weight`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::EpsInSqrt => "eps_in_sqrt",
            Fault::NoBiasCorrection => "no_bias_correction",
            Fault::StepFromZero => "step_from_zero",
            Fault::MseSum => "mse_sum",
            Fault::TransposedWeight => "transposed_weight",
            Fault::SkipUpdate { .. } => "skip_update",
        }
    }

    /// Whether the optimizer step of step `t` (from 1) is skipped.
    pub fn skips(self, t: u32) -> bool {
        matches!(self, Fault::SkipUpdate { step } if step == t)
    }
}
