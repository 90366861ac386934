//! What candle reported for one quantity of a probe ([`Outcome`]), and why a case stopped
//! ([`Fault`]: a candle refusal, which is an outcome, or a broken spec, which is an error).

use candle_core::Tensor;
use parity_common::probe_spec::catch_panic;

/// What candle reported for one quantity.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The values with their shape (run dtype; U32 for candle's indices), stacked along a
    /// new leading dimension when the case runs several optimizer steps.
    Ok(Tensor),
    /// The `GradStore` holds no gradient for the input.
    MissingGradient,
    /// candle's error message.
    FrameworkError(String),
    /// Why candle's API cannot compute the quantity (the missing function or argument).
    Unsupported(String),
}

/// Why a case stopped: candle refused, candle's API lacks something (both outcomes) or the
/// spec is broken (an error).
#[derive(Debug)]
pub(super) enum Fault {
    /// candle returned an error or panicked: `framework-error`, with the message.
    Framework(String),
    /// candle's API lacks what the case needs: `unsupported`, with the reason.
    Unsupported(String),
    /// The spec cannot run (a name that is not defined): an error of the run.
    Spec(anyhow::Error),
}

impl From<candle_core::Error> for Fault {
    /// candle's error as an outcome: `UnsupportedDTypeForOp` (the run's dtype has no kernel
    /// for an op on this device, e.g. BF16 matmul on the CPU) is `unsupported`, anything
    /// else a framework error; the message is the first line (candle appends backtraces and
    /// context on later lines).
    fn from(e: candle_core::Error) -> Self {
        let text = e.to_string();
        let line = text.lines().next().unwrap_or_default().to_string();
        let mut inner = &e;
        while let candle_core::Error::WithBacktrace { inner: i, .. }
        | candle_core::Error::Context { inner: i, .. }
        | candle_core::Error::WithPath { inner: i, .. } = inner
        {
            inner = i;
        }
        match inner {
            candle_core::Error::UnsupportedDTypeForOp(..) => Fault::Unsupported(line),
            _ => Fault::Framework(line),
        }
    }
}

/// A probe step's result: its value, or why the case stopped.
pub(super) type Step<T> = std::result::Result<T, Fault>;

/// Runs `f`, turning a panic inside candle into a framework error (see
/// [`parity_common::probe_spec::catch_panic`]).
pub(super) fn guarded<T>(f: impl FnOnce() -> Step<T>) -> Step<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(Fault::Framework(msg)))
}
