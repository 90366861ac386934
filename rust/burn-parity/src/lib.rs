//! burn side of the parity workflow: one training run or one op probe per invocation.
//!
//! The workflow resolves `config.yaml` into a [`parity_common::spec::RunSpec`], calls the
//! `burn-parity` binary, and turns the frames it writes ([`parity_common::frames`]) into a
//! Parquet trace, exactly as for `candle-parity`. burn runs on its ndarray backend (CPU only,
//! single-threaded: the `rayon` feature is off) with autodiff, in float32 or float64.
//!
//! Modules: [`device`] opens the ndarray device in the run's float type and reads tensors
//! back; [`layout`] converts Linear weights between PyTorch's `[out, in]` and burn's
//! `[in, out]`; [`model`] builds burn's `Linear`/`Conv1d` modules from the fixture;
//! [`optim`] configures burn's optimizers with every hyperparameter from the spec; [`train`]
//! is the loop (`loss.backward()` → `GradientsParams::from_grads` → `optim.step`); [`probe`]
//! interprets an op probe ([`parity_common::probe_spec`]) with burn's tensor API.

pub mod device;
mod fixture;
pub mod layout;
pub mod model;
pub mod moments;
pub mod optim;
pub mod probe;
pub mod replay;
pub mod taps;
pub mod train;

/// The burn version this binary was built against, read from Cargo.lock at build time.
pub const BURN_VERSION: &str = env!("BURN_VERSION");
