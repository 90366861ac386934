//! candle side of the parity workflow: one training run, one batch of op probes, one
//! replayed step or one inspection per invocation.
//!
//! The workflow resolves `config.yaml` into a [`parity_common::spec::RunSpec`], calls a
//! runner binary, and turns the frames it writes ([`parity_common::frames`]) into a Parquet
//! trace. Every model is a port ([`parity_common::candle::CandleModel`]): the built-in
//! families in [`families`] (an MLP, a 1-D CNN and a GPT-style transformer, built from the
//! fixture's `Var`s as the study built them), and a user's own model, whose crate the
//! workflow links into a runner of its own whose whole `main` is
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     candle_parity::main::<port::TinyLlama>("0123456789abcdef")
//! }
//! ```
//!
//! (`candle-parity` itself is `main::<NoPort>`). One loop serves them all: `train` (forward →
//! loss → `loss.backward()` → `opt.step(&grads)`), `replay` (one step from a given state
//! with every named intermediate, [`parity_common::replay`]) and `inspect` (what the port
//! asked for, its output's shape and the parameters without a gradient), each written once
//! and generic over the port; the optimizers are candle-nn's SGD and AdamW and a
//! hand-written AdamW ([`optim`], parity-common's [`parity_common::optim::RunOptimizer`]).
//! `probe` interprets a batch of op probes ([`parity_common::probe_spec::ProbeBatch`]).
//!
//! **Public face.** [`main`] and [`NoPort`] are what a runner binary needs; [`families`]
//! the built-in ports. The other public items (the loop, the optimizers, the device
//! helpers) serve the crate's own tests; a user's port needs none of them, only
//! parity-common's `candle` module.

mod data;
pub mod device;
pub mod families;
mod inspect;
pub mod net;
pub mod optim;
pub mod probe;
pub mod replay;
mod runner;
pub mod train;

pub use runner::{run_port, NoPort};

/// The candle-core version this binary was built against, read from Cargo.lock at build time.
pub const CANDLE_VERSION: &str = env!("CANDLE_CORE_VERSION");

/// Runs the shared command line ([`parity_common::cli::run`]) as candle's runner with the
/// user's port `M` ([`NoPort`] for a runner without one): the whole `main` of a runner
/// binary. `source_id` is what `source-id` prints (the build's hash of the runner's sources,
/// and the port's).
///
/// Returns success, or failure after printing the error (with its causes) to stderr: a spec
/// or fixture that cannot be read, a port that cannot be built (in `train` and `replay`;
/// `inspect` reports it as data), an unavailable device. A framework error inside the
/// training loop is not a failure: it ends the stream ([`train::run`]).
pub fn main<M: parity_common::candle::CandleModel>(
    source_id: &'static str,
) -> std::process::ExitCode {
    parity_common::cli::main::<runner::CandleRunner<M>>(source_id)
}
