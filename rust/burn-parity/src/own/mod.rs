//! The runner of a user's own model ("bring your own model", docs/own-model.md): the user's
//! burn port of a PyTorch model ([`BurnModel`]) trained, replayed and inspected exactly as
//! burn-parity's built-in families are.
//!
//! The workflow generates a runner crate per own model (`scripts/parity/own/crate.py`) whose
//! whole `src/main.rs` is
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     burn_parity::own::main::<port::TinyMixer>("0123456789abcdef")
//! }
//! ```
//!
//! with `port` the user's crate and the string the build's source id. [`main`] runs the
//! shared command line ([`parity_common::cli`]):
//!
//! * `train` ([`train::run`]): burn-parity's loop ([`crate::train::train_steps`]: forward →
//!   loss → `loss.backward()` → burn's optimizer of [`crate::optim::Stepper`]), the frames of
//!   parity-common's [`parity_common::optim::RunOptimizer`]; a framework error inside the
//!   loop ends the stream with an `end` frame of status `failed`;
//! * `replay` ([`replay::run`]): one step from a given state with the port's taps active;
//! * `inspect` ([`inspect::run`]): what the load reported, the output's shape and the
//!   parameters without a gradient, as JSON;
//! * `defaults`, `version` (burn's locked version), `source-id` (the string given to
//!   [`main`]). `probe` is refused: op probes are burn-parity's.
//!
//! The weights reach the port through burn-store ([`load`]): the fixture as a
//! `SafetensorsStore`, the rename table's and the port's key remapping,
//! `PyTorchToBurnAdapter` chained with a cast to the run dtype, `model.load_from(&mut
//! store)`. Every parameter is recorded back in PyTorch names and layout through the inverse
//! of that adapter, measured from burn-store's `BurnToPyTorchAdapter`
//! ([`load::ports_params`]).

use std::io::Write;
use std::marker::PhantomData;
use std::sync::OnceLock;

use anyhow::{bail, Result};
use parity_common::cli::{self, Runner};
use parity_common::own::burn::BurnModel;
use parity_common::own::Inspection;
use parity_common::probe_spec::ProbeBatch;
use parity_common::replay::ReplayState;
use parity_common::spec::RunSpec;

pub mod inspect;
pub mod load;
mod net;
pub mod replay;
pub mod train;

pub use net::{flat_output, own_loss, OwnData, OwnNet, OwnOptimizer};

/// The source id [`main`] was given, for `source-id`.
static SOURCE_ID: OnceLock<&'static str> = OnceLock::new();

/// The shared command line's [`Runner`] for port `M`.
struct OwnRunner<M>(PhantomData<fn() -> M>);

impl<M: BurnModel> Runner for OwnRunner<M> {
    const NAME: &'static str = "burn-parity-own";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "burn runner of a user's own model (docs/own-model.md)";
    const FRAMEWORK_VERSION: &'static str = crate::BURN_VERSION;

    fn source_id() -> &'static str {
        SOURCE_ID.get().copied().unwrap_or("unknown")
    }

    fn train(spec: &RunSpec, sink: Box<dyn Write>) -> Result<()> {
        train::run::<M, _>(spec, sink)
    }

    fn probe(_batch: &ProbeBatch, _sink: Box<dyn Write>) -> Result<()> {
        bail!("an own model's runner runs no op probes; burn-parity does")
    }

    fn replay(spec: &RunSpec, state: &ReplayState, sink: Box<dyn Write>) -> Result<()> {
        replay::run::<M, _>(spec, state, sink)
    }

    fn defaults() -> Result<serde_json::Value> {
        crate::optim::defaults_json()
    }

    fn inspect(spec: &RunSpec) -> Result<Inspection> {
        inspect::run::<M>(spec)
    }
}

/// Runs the shared command line ([`parity_common::cli::run`]) for the user's port `M`, the
/// whole of an own model's runner (see the module docs); `source_id` is what `source-id`
/// prints (the build's hash of the runner library's and the port's sources).
///
/// Returns success, or failure after printing the error (with its causes) to stderr: a spec
/// or fixture that cannot be read, a port that cannot be initialised or loaded (in `train`
/// and `replay`; `inspect` reports it as data). A framework error inside the training loop
/// is not a failure: it ends the stream (see [`train::run`]).
pub fn main<M: BurnModel>(source_id: &'static str) -> std::process::ExitCode {
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

#[cfg(test)]
mod tests;
