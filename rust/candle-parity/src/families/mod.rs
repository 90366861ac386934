//! The built-in model families, each a port ([`CandleModel`]) like a user's own model: built
//! from the fixture through the same `VarBuilder` (`parity_common::candle::FixtureStore`),
//! trained, replayed and inspected by the same loop. A run spec names one by its `family`
//! ([`parity_common::spec::ModelSpec`]); [`FAMILIES`] lists them and [`dispatch`] picks the
//! port type.
//!
//! Adding a family (docs/architecture.md, "Adding a model family"): its port in a module
//! here and one line in the `families!` list below; the same in `burn-parity`; its PyTorch
//! module and its entry in the config on the workflow's side.

use anyhow::{bail, Result};
use parity_common::candle::CandleModel;

pub mod cnn;
pub mod mlp;
pub mod transformer;

/// Something to do with a port type (train, replay or inspect it): what [`dispatch`] runs
/// for the family a run spec names.
pub trait PortJob {
    /// What the job returns.
    type Output;

    /// Runs the job with port type `M`.
    ///
    /// # Errors
    /// The job's.
    fn run<M: CandleModel>(self) -> Result<Self::Output>;
}

/// One line per family: its name in the run spec → its port type.
macro_rules! families {
    ($($name:literal => $port:ty),* $(,)?) => {
        /// The built-in families' names, as a run spec's `model.family` gives them.
        pub const FAMILIES: &[&str] = &[$($name),*];

        /// Runs `job` with the port of built-in family `family`.
        ///
        /// # Errors
        /// A family this crate has no port for (the message lists those it has), or the
        /// job's.
        pub fn dispatch<J: PortJob>(family: &str, job: J) -> Result<J::Output> {
            match family {
                $($name => job.run::<$port>(),)*
                other => bail!(
                    "candle-parity has no built-in model family {other:?} (it has {})",
                    FAMILIES.join(", ")
                ),
            }
        }
    };
}

families! {
    "mlp" => mlp::Mlp,
    "cnn1d" => cnn::Cnn,
    "transformer" => transformer::Transformer,
}
