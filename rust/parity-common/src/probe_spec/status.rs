//! What a runner reports for one (case, quantity) of a probe: its [`Status`], the `result`
//! frame's metadata ([`result_meta`]), and how a panic inside the framework becomes an
//! outcome ([`catch_panic`]).

use std::collections::HashMap;

use crate::frames::meta;

/// What a runner reports for one (case, quantity): the `status` of its `result` frame, one of
/// the Python side's `probe_results.STATUSES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The values, in the run dtype, are in the frame's `values` tensor.
    Ok,
    /// The framework gave no gradient for the input.
    MissingGradient,
    /// The framework raised an error (or panicked) before the quantity was known; the
    /// message says what.
    FrameworkError,
    /// The framework's API offers no way to compute the case (an op or an argument it
    /// lacks, or one the runner's interpreter does not map); the message says which.
    Unsupported,
}

impl Status {
    /// The name in the frame and in the result file: `ok`, `missing-gradient`,
    /// `framework-error`, `unsupported`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::MissingGradient => "missing-gradient",
            Status::FrameworkError => "framework-error",
            Status::Unsupported => "unsupported",
        }
    }
}

/// Metadata of the `result` frame of one (probe, case, quantity): `kind` `result`, `probe`,
/// `case`, `quantity`, `status` ([`Status::name`]) and `message` (empty unless the framework
/// raised or cannot run the case). With [`Status::Ok`] the frame holds one tensor `values`
/// with the quantity's shape, in the run dtype, or float32 for a half-precision run and
/// float64 for an integer quantity (both exact widenings).
pub fn result_meta(
    probe: &str,
    case: &str,
    quantity: &str,
    status: Status,
    message: &str,
) -> HashMap<String, String> {
    meta([
        ("kind", "result".into()),
        ("probe", probe.into()),
        ("case", case.into()),
        ("quantity", quantity.into()),
        ("status", status.name().into()),
        ("message", message.into()),
    ])
}

/// Runs `f`, catching a panic inside the framework it calls: `Err` holds the panic's message
/// on one line, prefixed `panic: ` (a probe case that panics is a framework error, an
/// outcome of the probe, not a crash of the runner).
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!(
            "panic: {}",
            msg.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })
}
