//! The shared command line's [`Runner`] for candle, written once: every subcommand runs the
//! port the run spec names, a built-in family ([`crate::families`]) or the user's port `M`
//! this runner was built with ([`crate::main`]).

use std::io::Write;
use std::marker::PhantomData;

use anyhow::{bail, Result};
use candle_core::Tensor;
use candle_nn::VarBuilder;
use parity_common::candle::{CandleModel, Taps};
use parity_common::cli::{PortDone, PortJob, Runner};
use parity_common::probe_spec::ProbeBatch;

use crate::families;

/// The port of a runner that links no user's model (`candle-parity` itself): a type without
/// values, so it is never built; a run spec of an own model given to such a runner is
/// refused by [`CandleModel::build`] with what to do instead.
pub enum NoPort {}

impl CandleModel for NoPort {
    /// # Errors
    /// Always: this runner links no user's port.
    fn build(_config: &serde_json::Value, _vb: VarBuilder) -> Result<Self> {
        bail!(
            "this runner links no user's port; the workflow builds a runner for each own \
             model from its crate (docs/own-model.md)"
        )
    }

    fn forward(&self, _x: &Tensor, _taps: &mut Taps) -> Result<Tensor> {
        match *self {}
    }
}

/// Runs `job` with the port its spec names: `M` for an own model, else the built-in
/// family's ([`families::dispatch`]).
///
/// # Errors
/// A family this crate has no port for, or the job's.
pub fn run_port<M: CandleModel>(job: PortJob<'_>) -> Result<PortDone> {
    if job.spec().model.is_own() {
        families::run::<M>(job)
    } else {
        families::dispatch(job)
    }
}

/// candle's [`Runner`] with the user's port `M` (or [`NoPort`]).
pub(crate) struct CandleRunner<M>(PhantomData<fn() -> M>);

impl<M: CandleModel> Runner for CandleRunner<M> {
    const NAME: &'static str = "candle-parity";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "candle side of the training-step parity workflow";
    const FRAMEWORK_VERSION: &'static str = crate::CANDLE_VERSION;

    fn run_port(job: PortJob<'_>) -> Result<PortDone> {
        run_port::<M>(job)
    }

    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()> {
        crate::probe::run(batch, sink)
    }

    /// candle-nn's `ParamsAdamW::default()` and what its SGD takes
    /// ([`crate::optim::defaults`]).
    fn defaults() -> Result<serde_json::Value> {
        Ok(crate::optim::defaults())
    }
}
