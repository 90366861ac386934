//! Framework-independent parts of the parity runners, and the contract of a port.
//!
//! **What a port uses** (a user's crate, docs/own-model.md, and the built-in families
//! inside the runner crates alike):
//!
//! * feature `candle`: [`candle::CandleModel`] (the trait; a port may bring its own loop
//!   through [`candle::PortOptimizer`] and the trait's optional methods), [`candle::Taps`] (named
//!   intermediates) and [`candle::FixtureStore`] (the `VarBuilder` backend serving the
//!   fixture by state_dict key);
//! * feature `burn`: [`burn::BurnModel`], [`burn::Taps`], [`burn::Input`] and
//!   [`burn::Output`];
//! * [`families`]: the configs of the built-in families both runners port.
//!
//! Without either feature this crate depends on no framework. Everything else is for the
//! runners (`candle-parity`, `burn-parity`), which a port never calls:
//!
//! * [`spec`]: the run specification that the workflow (Python,
//!   `scripts/parity/plan/runspec.py`) writes as JSON and every Rust runner reads. Unknown
//!   fields are refused, so a drift between the two sides fails loudly instead of silently
//!   ignoring a setting; its model ([`spec::ModelSpec`]) and deliberate faults
//!   ([`spec::Fault`]) are defined in private modules and re-exported there.
//! * [`frames`]: the stream of length-prefixed safetensors buffers a runner writes and
//!   `scripts/parity/trace/frames.py` reads, handed to a writer thread ([`frames::open_sink`]);
//!   the Parquet trace itself is written on the Python side, where the trace schema is
//!   defined once.
//! * [`build_info`]: helpers for the runners' build scripts (locked versions, compiler, the
//!   source id the workflow's build rule passes in).
//! * [`cli`]: the command line every runner shares (`train`, `probe`, `replay`, `inspect`,
//!   `defaults`, `version`, `source-id`) and the [`cli::Runner`] trait behind it.
//! * [`guard`]: a framework's panics caught as errors, and errors as one line.
//! * [`progress`]: the progress lines a training run writes to standard error, at least
//!   every ten seconds while its steps complete (the workflow's watchdog reads them).
//! * [`schedule`]: learning-rate schedules as PyTorch computes them, for a port's loop.
//! * [`replay`]: the state a same-state replay of one step starts from, and the names of
//!   the intermediates it records (docs/localisation.md).
//! * [`optim`]: the optimizer-stepping trait both runners implement ([`optim::RunOptimizer`],
//!   over their model's [`optim::Parameters`]) and, written once, what a recorded step holds.
//! * [`probe_spec`]: an op probe as normalized by `scripts/parity/probe/format.py`, which every
//!   Rust runner interprets with its own framework.
//! * [`Inspection`]: what `inspect` reports of a port before any training job.

pub mod build_info;
pub mod cli;
pub mod families;
mod fault;
pub mod frames;
pub mod guard;
mod model;
pub mod optim;
mod port;
pub mod probe_spec;
pub mod progress;
pub mod replay;
pub mod schedule;
mod sink;
pub mod spec;

pub use port::Inspection;

/// The candle side of a port (feature `candle`): see [`candle::CandleModel`].
#[cfg(feature = "candle")]
pub mod candle {
    pub use crate::port::candle::{
        Asked, CandleModel, FixtureStore, GradScalars, Groups, PortOptimizer, Tap, Taps,
    };
}

/// The burn side of a port (feature `burn`): see [`burn::BurnModel`].
#[cfg(feature = "burn")]
pub mod burn {
    pub use crate::port::burn::{BurnModel, Input, Output, Taps};
}
