//! Framework-independent parts of the parity runners.
//!
//! * [`spec`]: the run specification that the workflow (Python, `scripts/parity/plan/runspec.py`)
//!   writes as JSON and every Rust runner reads. Unknown fields are refused, so a drift between
//!   the two sides fails loudly instead of silently ignoring a setting.
//! * [`model`]: the model families of a run spec and their parameters (re-exported by
//!   [`spec`]).
//! * [`fault`]: the deliberate faults of the detection-power suite (re-exported by
//!   [`spec`]).
//! * [`frames`]: the stream of length-prefixed safetensors buffers a runner writes and
//!   `scripts/parity/trace/frames.py` reads; the Parquet trace itself is written on the Python side,
//!   where the trace schema is defined once.
//! * [`build_info`]: helpers for the runners' build scripts (locked versions, compiler, the
//!   source id the workflow's build rule passes in).
//! * [`cli`]: the command line every runner shares (`train`, `probe`, `replay`, `inspect`,
//!   `defaults`, `version`, `source-id`).
//! * [`replay`]: the state a same-state replay of one step starts from, and the names of
//!   the intermediates it records (docs/localisation.md).
//! * [`optim`]: the optimizer-stepping trait both runners implement ([`optim::RunOptimizer`],
//!   over their model's [`optim::Parameters`]) and, written once, what a recorded step holds.
//! * [`probe_spec`]: an op probe as normalized by `scripts/parity/probe/format.py`, which every
//!   Rust runner interprets with its own framework.
//! * [`own`]: a user's own model (docs/own-model.md): the framework-free report of `inspect`
//!   and the names of its replay; behind the cargo features `candle` and `burn`, the trait a
//!   user's port implements in that framework, its taps and (candle) the `VarBuilder` that
//!   serves it the fixture. Without either feature this crate depends on no framework.

pub mod build_info;
pub mod cli;
pub mod fault;
pub mod frames;
pub mod model;
pub mod optim;
pub mod own;
pub mod probe_spec;
pub mod replay;
pub mod sink;
pub mod spec;
