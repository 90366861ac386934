//! burn side of the parity workflow: one training run, one batch of op probes or one
//! replayed step per invocation.
//!
//! The workflow resolves `config.yaml` into a [`parity_common::spec::RunSpec`], calls the
//! `burn-parity` binary, and turns the frames it writes ([`parity_common::frames`]) into a
//! Parquet trace, exactly as for `candle-parity`. burn runs on its ndarray backend (CPU only,
//! single-threaded: the `rayon` feature is off) with autodiff, in float32 or float64.
//!
//! Modules: [`device`] opens the ndarray device in the run's float type and reads tensors
//! back; [`layout`] converts Linear weights between PyTorch's `[out, in]` and burn's
//! `[in, out]`; [`model`] loads the run's model from the fixture, holds the data and the
//! losses, and maps every state_dict key onto burn's parameters (export, gradients,
//! replacing parameters by a given state); the families are [`mlp`] and [`cnn`] (burn's
//! `Linear`/`Conv1d` modules) and [`transformer`] (a GPT-style pre-LayerNorm decoder from
//! burn-nn's `Embedding`, `LayerNorm` and `Linear`, causal attention in burn's tensor ops),
//! built from the shared Linear loaders and parameter slots of `layers`; [`taps`] marks the forward
//! pass's intermediates so their gradients can be read; [`optim`] configures burn's
//! optimizers with every hyperparameter from the spec (parity-common's
//! [`parity_common::optim::RunOptimizer`], over the [`model::Net`]'s
//! [`parity_common::optim::Parameters`]); [`moments`] reads Adam's and AdamW's
//! moments out of burn's optimizer record and starts the optimizer from given ones; [`train`]
//! is the loop (`loss.backward()` → `GradientsParams::from_grads` → `optim.step`), recording
//! parameters, gradients and moments; [`replay`] runs one step from a given state with every
//! intermediate ([`parity_common::replay`]); [`probe`] interprets a batch of op probes
//! ([`parity_common::probe_spec::ProbeBatch`]) with burn's tensor API.

pub mod cnn;
mod data;
pub mod device;
mod fixture;
mod layers;
pub mod layout;
pub mod mlp;
pub mod model;
pub mod moments;
pub mod optim;
pub mod own;
pub mod probe;
pub mod replay;
pub mod taps;
pub mod train;
pub mod transformer;

/// The burn version this binary was built against, read from Cargo.lock at build time.
pub const BURN_VERSION: &str = env!("BURN_VERSION");
