//! The built-in model families, each a port ([`CandleModel`]) like a user's own model: built
//! from the fixture through the same `VarBuilder` (`parity_common::candle::FixtureStore`),
//! trained, replayed and inspected by the same loop. A run spec names one by its `family`
//! ([`parity_common::spec::ModelSpec`]); [`FAMILIES`] lists them and [`dispatch`] runs a
//! job with the port's type ([`run`]).
//!
//! Adding a family (docs/architecture.md, "Adding a model family"): its port in a module
//! here and one line in the `port_registry!` list below; the same in `burn-parity`; its PyTorch
//! module and its entry in the config on the workflow's side.

use anyhow::Result;
use parity_common::candle::CandleModel;
use parity_common::cli::{PortDone, PortJob};

pub mod cnn;
pub mod mlp;
pub mod transformer;

parity_common::port_registry! {
    runner: "candle-parity",
    run: run,
    families: {
        "mlp" => mlp::Mlp,
        "cnn1d" => cnn::Cnn,
        "transformer" => transformer::Transformer,
    }
}

/// Runs `job` with port `M`: `train` ([`crate::train::run`]), `replay`
/// ([`crate::replay::run`]) or `inspect`.
///
/// # Errors
/// The job's.
pub fn run<M: CandleModel>(job: PortJob<'_>) -> Result<PortDone> {
    Ok(match job {
        PortJob::Train { spec, sink } => {
            crate::train::run::<M, _>(spec, sink)?;
            PortDone::Streamed
        }
        PortJob::Replay { spec, state, sink } => {
            crate::replay::run::<M, _>(spec, state, sink)?;
            PortDone::Streamed
        }
        PortJob::Inspect { spec } => PortDone::Inspected(Box::new(crate::inspect::run::<M>(spec)?)),
    })
}
