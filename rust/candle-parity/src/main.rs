//! `candle-parity`: one training run, one op probe or one replayed step per invocation; the
//! workflow decides which (the command line is parity_common::cli's).

use std::io::Write;

use anyhow::Result;
use parity_common::cli::{self, Runner};
use parity_common::probe_spec::ProbeBatch;
use parity_common::replay::ReplayState;
use parity_common::spec::RunSpec;

struct Candle;

impl Runner for Candle {
    const NAME: &'static str = "candle-parity";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const ABOUT: &'static str = "candle side of the training-step parity workflow";
    const FRAMEWORK_VERSION: &'static str = candle_parity::CANDLE_VERSION;
    fn source_id() -> &'static str {
        env!("PARITY_SOURCE_ID")
    }

    fn train(spec: &RunSpec, sink: Box<dyn Write>) -> Result<()> {
        candle_parity::train::run(spec, sink)
    }

    fn replay(spec: &RunSpec, state: &ReplayState, sink: Box<dyn Write>) -> Result<()> {
        candle_parity::replay::run(spec, state, sink)
    }

    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()> {
        candle_parity::probe::run(batch, sink)
    }

    /// candle-nn's `ParamsAdamW::default()` and what its SGD takes
    /// ([`candle_parity::optim::defaults`]).
    fn defaults() -> Result<serde_json::Value> {
        Ok(candle_parity::optim::defaults())
    }
}

fn main() -> Result<()> {
    cli::run::<Candle>()
}
