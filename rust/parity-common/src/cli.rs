//! The command line every Rust runner shares (`candle-parity`, `burn-parity`, an own model's
//! runner): the same subcommands, which the workflow calls alike (`scripts/parity/run/rust.py`,
//! `scripts/parity/run/build.py`, the defaults rule). A runner says what its framework does
//! for each through [`Runner`] and calls [`run`] from its `main`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::frames::open_sink;
use crate::port::Inspection;
use crate::probe_spec::ProbeBatch;
use crate::replay::ReplayState;
use crate::spec::RunSpec;

/// What a runner's framework does for each subcommand.
pub trait Runner {
    /// The binary's name (`candle-parity`).
    const NAME: &'static str;
    /// The runner's own package version, for `--version`.
    const VERSION: &'static str;
    /// One line for `--help` (`candle side of the training-step parity workflow`).
    const ABOUT: &'static str;
    /// The framework's version this binary was built with (from Cargo.lock, see
    /// [`crate::build_info`]).
    const FRAMEWORK_VERSION: &'static str;
    /// What `source-id` prints: the hash of the runner's sources the workflow's build rule
    /// embedded (`env!("PARITY_SOURCE_ID")`, see [`crate::build_info::emit`]), or the one an
    /// own model's generated `main` passes in. A function, not a constant, because the own
    /// model's runner receives it at run time.
    fn source_id() -> &'static str;

    /// Trains as `spec` says and writes frames (see [`crate::frames`]) to `sink`.
    ///
    /// # Errors
    /// Whatever stops the run (the runner's own docs say which).
    fn train(spec: &RunSpec, sink: Box<dyn Write>) -> Result<()>;

    /// Runs a batch of op probes and writes a header, one `result` frame per (probe, case,
    /// quantity) in the batch's order, and an `end` frame to `sink`; the framework's errors
    /// and panics are results, not failures.
    ///
    /// # Errors
    /// Only for a spec the runner cannot interpret, an unavailable device or a failing sink.
    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()>;

    /// Replays one step from the given state and writes a `header`, one `replay` and an
    /// `end` frame (see [`crate::replay`]).
    ///
    /// # Errors
    /// When the framework cannot start from the state (the runner's docs say which), or
    /// on tensor failures.
    fn replay(spec: &RunSpec, state: &ReplayState, sink: Box<dyn Write>) -> Result<()>;

    /// The framework's optimizer defaults as JSON, read from the library itself.
    ///
    /// # Errors
    /// When the library's config types cannot be serialised.
    fn defaults() -> Result<serde_json::Value>;

    /// Builds the run's port from the fixture as `train` does, runs one forward pass and one
    /// backward on batch 0, and reports what it found ([`Inspection`]; the port's build,
    /// forward and backward errors are data in it).
    ///
    /// # Errors
    /// A fixture the runner cannot read, an unavailable device, a model the runner has no
    /// port for.
    fn inspect(spec: &RunSpec) -> Result<Inspection>;
}

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train as the run spec says and write frames (see parity_common::frames).
    Train {
        /// Run spec JSON written by the workflow.
        #[arg(long)]
        spec: PathBuf,
        /// Where to write the frames; `-` is standard output.
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Run a batch of op probes (normalized by the workflow) and write one `result` frame
    /// per (probe, case, quantity); the framework's errors and panics, and ops its API
    /// lacks, are results, not failures.
    Probe {
        /// Probe batch JSON written by the workflow (`{"probes": [spec, ...]}`).
        #[arg(long)]
        spec: PathBuf,
        /// Where to write the frames; `-` is standard output.
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Replay one step from a given state (parameters after step − 1 and, for Adam/AdamW,
    /// the moments) and write every intermediate (see parity_common::replay).
    Replay {
        /// Run spec JSON written by the workflow (model, loss, optimizer, fault, fixture).
        #[arg(long)]
        spec: PathBuf,
        /// safetensors file with the state: parameters, `exp_avg:`/`exp_avg_sq:` moments.
        #[arg(long)]
        state: PathBuf,
        /// The step to replay (from 1); its batch is (step − 1) mod batches.
        #[arg(long)]
        step: u32,
        /// Where to write the frames; `-` is standard output.
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Build the run's port from the fixture, run one forward and one backward pass on batch
    /// 0, and print what it found as one JSON object (parity_common::Inspection).
    Inspect {
        /// Run spec JSON written by the workflow (an own model's).
        #[arg(long)]
        spec: PathBuf,
    },
    /// Print the framework's optimizer defaults as JSON, read from the library itself.
    Defaults,
    /// Print the framework version this binary was built with.
    Version,
    /// Print the source id the workflow's build rule embedded (a hash of this runner's
    /// sources), so the rule can check it copied this checkout's binary.
    SourceId,
}

/// Parses the process's command line as runner `R` and runs the subcommand; `--help` and
/// argument errors exit the process through clap.
///
/// # Errors
/// Those of the subcommand ([`Runner`]), and failures to open `--out` or read `--spec`.
pub fn run<R: Runner>() -> Result<()> {
    let matches = Cli::command()
        .name(R::NAME)
        .about(R::ABOUT)
        .version(R::VERSION)
        .get_matches();
    match Cli::from_arg_matches(&matches)?.command {
        Command::Train { spec, out } => R::train(&RunSpec::from_path(&spec)?, open_sink(&out)?),
        Command::Probe { spec, out } => R::probe(&ProbeBatch::from_path(&spec)?, open_sink(&out)?),
        Command::Replay {
            spec,
            state,
            step,
            out,
        } => {
            let spec = RunSpec::from_path(&spec)?;
            let state = ReplayState::from_path(&state, step, &spec)?;
            R::replay(&spec, &state, open_sink(&out)?)
        }
        Command::Inspect { spec } => {
            let inspection = R::inspect(&RunSpec::from_path(&spec)?)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", serde_json::to_string(&inspection)?)?;
            out.flush()?;
            Ok(())
        }
        Command::Defaults => {
            println!("{}", serde_json::to_string_pretty(&R::defaults()?)?);
            Ok(())
        }
        Command::Version => {
            println!("{}", R::FRAMEWORK_VERSION);
            Ok(())
        }
        Command::SourceId => {
            println!("{}", R::source_id());
            Ok(())
        }
    }
}
