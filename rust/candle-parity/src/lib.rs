//! candle side of the parity workflow: one training run, one batch of op probes or one
//! replayed step per invocation.
//!
//! The workflow resolves `config.yaml` into a [`parity_common::spec::RunSpec`], calls the
//! `candle-parity` binary, and turns the frames it writes ([`parity_common::frames`]) into a
//! Parquet trace. Modules mirror candle's own examples: [`model`] builds the forward pass
//! from `Var`s, [`optim`] wraps the optimizers (parity-common's
//! [`parity_common::optim::RunOptimizer`], over the [`model::Net`]'s
//! [`parity_common::optim::Parameters`]), [`train`] is the loop
//! (`loss.backward()` → `opt.step(&grads)`); [`transformer`] is the GPT-style family, with
//! its fused-op negative controls (candle ops without a backward). [`probe`] interprets a
//! batch of op probes ([`parity_common::probe_spec::ProbeBatch`]) and reports each quantity
//! of each case as an outcome.
//! [`replay`] replays one step from a given state ([`parity_common::replay`]) and records
//! every intermediate, its gradient, and each parameter's gradient and update; [`device`]
//! maps devices and converts tensors to and from the frames and the replay state. [`own`]
//! is the runner of a user's own model (a port implementing
//! [`parity_common::own::candle::CandleModel`]), with the same loop, optimizers, losses and
//! frames.

pub mod device;
pub mod model;
pub mod optim;
pub mod own;
pub mod probe;
pub mod replay;
pub mod train;
pub mod transformer;

/// The candle-core version this binary was built against, read from Cargo.lock at build time.
pub const CANDLE_VERSION: &str = env!("CANDLE_CORE_VERSION");
