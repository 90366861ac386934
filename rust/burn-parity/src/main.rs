//! `burn-parity`: one training run, one op probe or one replayed step per invocation; the
//! workflow decides which (the command line is parity_common::cli's).

use std::io::Write;

use anyhow::Result;
use parity_common::cli::{self, Runner};
use parity_common::probe_spec::ProbeBatch;
use parity_common::spec::RunSpec;

struct Burn;

impl Runner for Burn {
    const NAME: &'static str = "burn-parity";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "burn side of the training-step parity workflow";
    const FRAMEWORK_VERSION: &'static str = burn_parity::BURN_VERSION;
    fn source_id() -> &'static str {
        env!("PARITY_SOURCE_ID")
    }

    fn train(spec: &RunSpec, sink: Box<dyn Write>) -> Result<()> {
        burn_parity::train::run(spec, sink)
    }

    fn replay(
        spec: &RunSpec,
        state: &parity_common::replay::ReplayState,
        sink: Box<dyn Write>,
    ) -> Result<()> {
        burn_parity::replay::run(spec, state, sink)
    }

    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()> {
        burn_parity::probe::run(batch, sink)
    }

    /// burn's optimizer defaults, serialised from burn's config types.
    fn defaults() -> Result<serde_json::Value> {
        burn_parity::optim::defaults_json()
    }
}

fn main() -> Result<()> {
    cli::run::<Burn>()
}
