//! burn side of the parity workflow: one training run, one batch of op probes, one replayed
//! step or one inspection per invocation.
//!
//! The workflow resolves `config.yaml` into a [`parity_common::spec::RunSpec`], calls a
//! runner binary, and turns the frames it writes ([`parity_common::frames`]) into a Parquet
//! trace, exactly as for `candle-parity`. burn runs on the CPU backend the build's features
//! pick ([`BURN_BACKEND`]: `ndarray`, the default, or `flex`; single-threaded, `rayon` and
//! `simd` off) with autodiff, in float32 or float64.
//!
//! Every model is a port ([`parity_common::burn::BurnModel`]): the built-in families in
//! [`families`] (an MLP, a 1-D CNN and a GPT-style transformer of burn-nn modules), and a
//! user's own model, whose crate the workflow links into a runner of its own whose whole
//! `main` is
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     burn_parity::main::<port::TinyMixer>("0123456789abcdef")
//! }
//! ```
//!
//! (`burn-parity` itself is `main::<NoPort>`). Every port is loaded from the fixture through
//! burn-store ([`load`]: the fixture's tensors in PyTorch names and layout, burn-store's
//! `PyTorchToBurnAdapter`, the port's key remapping) and recorded back in PyTorch names and
//! layout. One loop serves them all: `train` ([`train`]: forward → loss → `loss.backward()`
//! → `GradientsParams::from_grads` → `optim.step`, with the training loop's schedule
//! ([`schedule`]), clipping ([`clip`]), parameter groups and accumulation where the run has
//! them), `replay` ([`replay`], one step from a
//! given state with every named intermediate) and `inspect`, each written once and generic
//! over the port; [`optim`] configures burn's optimizers with every hyperparameter from the
//! spec, and [`moments`] reads Adam's and AdamW's moments out of burn's optimizer record and
//! starts the optimizer from given ones. [`probe`] interprets a batch of op probes
//! ([`parity_common::probe_spec::ProbeBatch`]) with burn's tensor API.
//!
//! **Public face.** [`main`] and [`NoPort`] are what a runner binary needs; [`families`] the
//! built-in ports. The other public items serve the crate's own tests; a user's port needs
//! none of them, only parity-common's `burn` module.

pub mod clip;
mod data;
pub mod device;
pub mod families;
mod fixture;
mod inspect;
pub mod layout;
pub mod load;
pub mod moments;
pub mod net;
pub mod optim;
pub mod probe;
pub mod replay;
mod runner;
pub mod schedule;
pub mod train;

pub use runner::{run_port, NoPort};

/// The burn version this binary was built against, read from Cargo.lock at build time.
pub const BURN_VERSION: &str = env!("BURN_VERSION");

/// burn's CPU backend this binary computes with, `ndarray` or `flex` (its cargo features).
pub const BURN_BACKEND: &str = env!("BURN_BACKEND");

/// What the binary reports as its framework version: [`BURN_VERSION`] for the ndarray
/// backend, `<version>+flex` for Flex (config `burn.versions` spells releases so).
pub const BURN_RELEASE: &str = env!("BURN_RELEASE");

/// Runs the shared command line ([`parity_common::cli::run`]) as burn's runner with the
/// user's port `M` ([`NoPort`] for a runner without one): the whole `main` of a runner
/// binary. `source_id` is what `source-id` prints (the build's hash of the runner's sources,
/// and the port's).
///
/// Returns success, or failure after printing the error (with its causes) to stderr: a spec
/// or fixture that cannot be read, a port that cannot be initialised or loaded (in `train`
/// and `replay`; `inspect` reports it as data). A framework error inside the training loop
/// is not a failure: it ends the stream ([`train::run`]).
pub fn main<M: parity_common::burn::BurnModel>(source_id: &'static str) -> std::process::ExitCode {
    parity_common::cli::main::<runner::BurnRunner<M>>(source_id)
}
