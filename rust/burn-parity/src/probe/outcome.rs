//! What a probe reports for one quantity ([`Outcome`]), and why a case stopped (a burn
//! refusal, which is an outcome, or a broken spec, which is an error).

use crate::device::Host;
use parity_common::probe_spec::{catch_panic, Status};

/// What burn reported for one quantity.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The values (row-major) and burn's shape of them: in the run dtype for a float
    /// quantity, float64 ([`Host::F64`]) for an integer one (argmax, argmin, argsort).
    Ok {
        /// Host values.
        values: Host,
        /// Shape as burn gives it (`[1]` for a scalar; `[n, …]` for a training loop).
        shape: Vec<usize>,
    },
    /// burn gave no gradient for the input.
    MissingGradient,
    /// burn's panic or error message.
    FrameworkError(String),
    /// Why burn's API cannot run the case (or compute this quantity).
    Unsupported(String),
}

impl Outcome {
    /// The `status` of the quantity's `result` frame and its message.
    pub fn status(&self) -> (Status, &str) {
        match self {
            Outcome::Ok { .. } => (Status::Ok, ""),
            Outcome::MissingGradient => (Status::MissingGradient, ""),
            Outcome::FrameworkError(m) => (Status::FrameworkError, m),
            Outcome::Unsupported(m) => (Status::Unsupported, m),
        }
    }
}

/// Why burn gave no value: an outcome of the probe.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// burn panicked or returned an error.
    Framework(String),
    /// burn's API has no such op, rank, dtype or argument.
    Unsupported(String),
}

impl Refusal {
    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Refusal::Framework(m) => Outcome::FrameworkError(m.clone()),
            Refusal::Unsupported(m) => Outcome::Unsupported(m.clone()),
        }
    }
}

/// Why a case stopped: burn refused (an outcome) or the spec is broken (an error).
#[derive(Debug)]
pub(crate) enum Fault {
    Refused(Refusal),
    Spec(anyhow::Error),
}

impl From<Refusal> for Fault {
    fn from(r: Refusal) -> Self {
        Fault::Refused(r)
    }
}

/// The result of one interpreter step.
pub(crate) type Step<T> = std::result::Result<T, Fault>;

/// An `unsupported` fault with the reason (naming burn's missing API).
pub(crate) fn unsupported(why: impl Into<String>) -> Fault {
    Fault::Refused(Refusal::Unsupported(why.into()))
}

/// A `framework-error` fault with burn's (or the argument check's) message.
pub(crate) fn framework(message: impl Into<String>) -> Fault {
    Fault::Refused(Refusal::Framework(message.into()))
}

/// Runs `f`, turning a panic inside burn into a framework error (see
/// [`parity_common::probe_spec::catch_panic`]).
pub(crate) fn guarded<T>(f: impl FnOnce() -> Step<T>) -> Step<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(framework(msg)))
}
