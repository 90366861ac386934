//! The runner of a user's own model ("bring your own model", docs/own-model.md): the
//! user's candle port of a PyTorch model ([`CandleModel`]) trained, replayed and inspected
//! exactly as the built-in families are.
//!
//! The workflow generates a runner crate per own model (`scripts/parity/own/crate.py`)
//! whose whole `src/main.rs` is
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     candle_parity::own::main::<port::TinyLlama>("0123456789abcdef")
//! }
//! ```
//!
//! with `port` the user's crate and the string the build's source id. [`main`] runs the
//! shared command line ([`parity_common::cli`]):
//!
//! * `train` ([`train::run`]): the loop of [`crate::train::run`] (forward → loss →
//!   `loss.backward()` → the optimizer of [`crate::optim::Stepper`]), the frames of
//!   parity-common's [`parity_common::optim::RunOptimizer`]; a framework error inside the
//!   loop ends the stream with an `end` frame of status `failed`;
//! * `replay` ([`replay::run`]): one step from a given state with the port's taps active;
//! * `inspect` ([`inspect::run`]): what the port asked for, its output's shape and the
//!   parameters without a gradient, as JSON;
//! * `defaults`, `version` (candle-core's locked version), `source-id` (the string given to
//!   [`main`]). `probe` is refused: op probes are candle-parity's.
//!
//! The pieces: [`OwnFixture`] (the fixture's tensors and data: token ids reach the port as
//! `DType::U32` `[B, T]`), parity-common's [`parity_common::own::candle::FixtureStore`]
//! (the port's `VarBuilder`), [`OwnNet`] (the port over the store's `Var`s), [`own_loss`]
//! (the built-in runs' losses) and [`OwnStepper`] (the built-in runs' optimizers).

use std::io::Write;
use std::marker::PhantomData;
use std::sync::OnceLock;

use anyhow::{bail, Result};
use parity_common::cli::{self, Runner};
use parity_common::own::candle::CandleModel;
use parity_common::own::Inspection;
use parity_common::probe_spec::ProbeBatch;
use parity_common::replay::ReplayState;
use parity_common::spec::RunSpec;

pub mod inspect;
mod net;
pub mod replay;
pub mod train;

pub use net::{guarded, message, own_loss, OwnData, OwnFixture, OwnNet, OwnStepper};

/// The source id [`main`] was given, for `source-id`.
static SOURCE_ID: OnceLock<&'static str> = OnceLock::new();

/// The shared command line's [`Runner`] for port `M`.
struct OwnRunner<M>(PhantomData<fn() -> M>);

impl<M: CandleModel> Runner for OwnRunner<M> {
    const NAME: &'static str = "candle-parity-own";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "candle runner of a user's own model (docs/own-model.md)";
    const FRAMEWORK_VERSION: &'static str = crate::CANDLE_VERSION;

    fn source_id() -> &'static str {
        SOURCE_ID.get().copied().unwrap_or("unknown")
    }

    fn train(spec: &RunSpec, sink: Box<dyn Write>) -> Result<()> {
        train::run::<M, _>(spec, sink)
    }

    fn probe(_batch: &ProbeBatch, _sink: Box<dyn Write>) -> Result<()> {
        bail!("an own model's runner runs no op probes; candle-parity does")
    }

    fn replay(spec: &RunSpec, state: &ReplayState, sink: Box<dyn Write>) -> Result<()> {
        replay::run::<M, _>(spec, state, sink)
    }

    fn defaults() -> Result<serde_json::Value> {
        Ok(crate::optim::defaults())
    }

    fn inspect(spec: &RunSpec) -> Result<Inspection> {
        inspect::run::<M>(spec)
    }
}

/// Runs the shared command line ([`parity_common::cli::run`]) for the user's port `M`, the
/// whole of an own model's runner (see the module docs); `source_id` is what `source-id`
/// prints (the build's hash of the runner library's and the port's sources).
///
/// Returns success, or failure after printing the error (with its causes) to stderr: a
/// spec or fixture that cannot be read, a port that cannot be built (in `train` and
/// `replay`; `inspect` reports it as data), an unavailable device. A framework error inside
/// the training loop is not a failure: it ends the stream (see [`train::run`]).
pub fn main<M: CandleModel>(source_id: &'static str) -> std::process::ExitCode {
    // Set once per process; a second call keeps the first id, as a binary has one.
    let _ = SOURCE_ID.set(source_id);
    match cli::run::<OwnRunner<M>>() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}
