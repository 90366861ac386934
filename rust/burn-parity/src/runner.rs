//! The shared command line's [`Runner`] for burn, written once: every subcommand runs the
//! port the run spec names, a built-in family ([`crate::families`]) or the user's port `M`
//! this runner was built with ([`crate::main`]).

use std::io::Write;
use std::marker::PhantomData;

use anyhow::{bail, Result};
use burn::module::Module;
use burn::tensor::Device;
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::cli::{PortDone, PortJob, Runner};
use parity_common::probe_spec::ProbeBatch;

use crate::families;

/// The port of a runner that links no user's model (`burn-parity` itself): a module without
/// parameters whose [`BurnModel::init`] always fails, so a run spec of an own model given to
/// such a runner is refused with what to do instead.
#[derive(Module, Debug)]
pub struct NoPort;

impl BurnModel for NoPort {
    /// # Errors
    /// Always: this runner links no user's port.
    fn init(_config: &serde_json::Value, _device: &Device) -> Result<Self> {
        bail!(
            "this runner links no user's port; the workflow builds a runner for each own \
             model from its crate (docs/own-model.md)"
        )
    }

    /// # Errors
    /// Always (it is never initialised).
    fn forward(&self, _x: Input, _taps: &mut Taps) -> Result<Output> {
        bail!("this runner links no user's port")
    }
}

/// Runs `job` with the port its spec names: `M` for an own model, else the built-in
/// family's ([`families::dispatch`]).
///
/// # Errors
/// A family this crate has no port for, or the job's.
pub fn run_port<M: BurnModel>(job: PortJob<'_>) -> Result<PortDone> {
    if job.spec().model.is_own() {
        families::run::<M>(job)
    } else {
        families::dispatch(job)
    }
}

/// burn's [`Runner`] with the user's port `M` (or [`NoPort`]).
pub(crate) struct BurnRunner<M>(PhantomData<fn() -> M>);

impl<M: BurnModel> Runner for BurnRunner<M> {
    const NAME: &'static str = "burn-parity";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "burn side of the training-step parity workflow";
    const FRAMEWORK_VERSION: &'static str = crate::BURN_RELEASE;

    fn run_port(job: PortJob<'_>) -> Result<PortDone> {
        run_port::<M>(job)
    }

    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()> {
        crate::probe::run(batch, sink)
    }

    /// burn's optimizer defaults, serialised from burn's config types
    /// ([`crate::optim::defaults_json`]).
    fn defaults() -> Result<serde_json::Value> {
        crate::optim::defaults_json()
    }
}
