//! The command line every Rust runner shares (`candle-parity`, `burn-parity`, an own model's
//! runner): the same subcommands, which the workflow calls alike (`scripts/parity/train/rust.py`,
//! `scripts/parity/train/build.py`, the defaults rule). A runner says what its framework does
//! for each through [`Runner`] and calls [`run`] from its `main`.

use std::io::Write;
use std::path::PathBuf;

use std::sync::OnceLock;

use anyhow::{bail, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::frames::{open_sink, protocol_output};
use crate::port::Inspection;
use crate::probe_spec::ProbeBatch;
use crate::replay::ReplayState;
use crate::spec::RunSpec;

/// A subcommand that runs a port (a built-in family's or a user's): what a runner's port
/// registry receives, to run with the port the spec names (`parity_common::port_registry!`).
pub enum PortJob<'a> {
    /// `train`: train as `spec` says and write frames (see [`crate::frames`]) to `sink`.
    Train {
        /// The run.
        spec: &'a RunSpec,
        /// Where the frames go.
        sink: Box<dyn Write + 'a>,
    },
    /// `replay`: replay one step from `state` and write a `header`, one `replay` and an
    /// `end` frame (see [`crate::replay`]) to `sink`.
    Replay {
        /// The run.
        spec: &'a RunSpec,
        /// The state of the step before, and the step.
        state: &'a ReplayState,
        /// Where the frames go.
        sink: Box<dyn Write + 'a>,
    },
    /// `inspect`: build the port from the fixture as `train` does, run one forward pass and
    /// one backward on batch 0, and report what it found ([`Inspection`]; the port's build,
    /// forward and backward errors are data in it).
    Inspect {
        /// The run.
        spec: &'a RunSpec,
    },
}

impl PortJob<'_> {
    /// The run spec the job runs.
    pub fn spec(&self) -> &RunSpec {
        match self {
            PortJob::Train { spec, .. }
            | PortJob::Replay { spec, .. }
            | PortJob::Inspect { spec } => spec,
        }
    }
}

/// What a [`PortJob`] gives back.
#[derive(Debug)]
pub enum PortDone {
    /// `train` or `replay`: every frame is written.
    Streamed,
    /// `inspect`: the report.
    Inspected(Box<Inspection>),
}

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

    /// Runs `job` (`train`, `replay`, `inspect`) with the port its spec names: a built-in
    /// family of the runner's registry, or the user's port the binary links.
    ///
    /// # Errors
    /// Whatever stops the job before or outside the training loop (the runner's own docs
    /// say which): a fixture or state that cannot be read, an unavailable device, a port
    /// that cannot be built, a model the runner has no port for.
    fn run_port(job: PortJob<'_>) -> Result<PortDone>;

    /// Runs a batch of op probes and writes a header, one `result` frame per (probe, case,
    /// quantity) in the batch's order, and an `end` frame to `sink`; the framework's errors
    /// and panics are results, not failures.
    ///
    /// # Errors
    /// Only for a spec the runner cannot interpret, an unavailable device or a failing sink.
    fn probe(batch: &ProbeBatch, sink: Box<dyn Write>) -> Result<()>;

    /// The framework's optimizer defaults as JSON, read from the library itself.
    ///
    /// # Errors
    /// When the library's config types cannot be serialised.
    fn defaults() -> Result<serde_json::Value>;
}

/// The source id [`main`] was given, for `source-id`.
static SOURCE_ID: OnceLock<&'static str> = OnceLock::new();

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
/// A subcommand that runs a port or writes frames to standard output (`train`, `probe` and
/// `replay` with `--out -`, `inspect`) sets standard output apart for its protocol first
/// ([`protocol_output`]): whatever the port prints goes to standard error.
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
        Command::Train { spec, out } => {
            let spec = RunSpec::from_path(&spec)?;
            R::run_port(PortJob::Train {
                spec: &spec,
                sink: open_sink(&out)?,
            })?;
            Ok(())
        }
        Command::Probe { spec, out } => R::probe(&ProbeBatch::from_path(&spec)?, open_sink(&out)?),
        Command::Replay {
            spec,
            state,
            step,
            out,
        } => {
            let spec = RunSpec::from_path(&spec)?;
            let state = ReplayState::from_path(&state, step, &spec)?;
            R::run_port(PortJob::Replay {
                spec: &spec,
                state: &state,
                sink: open_sink(&out)?,
            })?;
            Ok(())
        }
        Command::Inspect { spec } => {
            let spec = RunSpec::from_path(&spec)?;
            // Before the port runs: its prints go to standard error, not into the JSON.
            let mut out = protocol_output()?;
            let PortDone::Inspected(inspection) = R::run_port(PortJob::Inspect { spec: &spec })?
            else {
                bail!("{} gave no inspection", R::NAME);
            };
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
            println!("{}", SOURCE_ID.get().copied().unwrap_or("unknown"));
            Ok(())
        }
    }
}

/// The whole `main` of a runner binary: runs the shared command line as runner `R` ([`run`])
/// and turns its result into the exit status. `source_id` is what `source-id` prints: the
/// hash of the runner's sources the workflow's build embedded (`env!("PARITY_SOURCE_ID")`,
/// see [`crate::build_info::emit`]), or the one an own model's generated `main` passes in
/// (the runner's sources and the port's).
///
/// Returns success, or failure after printing the error (with its causes) to stderr.
pub fn main<R: Runner>(source_id: &'static str) -> std::process::ExitCode {
    // Set once per process; a second call keeps the first id, as a binary has one.
    let _ = SOURCE_ID.set(source_id);
    match run::<R>() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:?}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Declares a runner crate's port registry, in its `families` module: the built-in families
/// by the name a run spec's `model.family` gives them, each with its port type, and
/// `dispatch`, which runs a [`PortJob`] with the port its spec names through the crate's
/// generic `run` function (`run::<Port>(job)`, given as `run:`). It defines
///
/// * `FAMILIES: &[&str]`, the names in the list's order (`scripts/parity/plan/own.py`,
///   `builtin_families`, reads the same lines);
/// * `fn dispatch(job: PortJob) -> anyhow::Result<PortDone>`, refusing a family the list
///   lacks with the ones it has.
///
/// ```ignore
/// parity_common::port_registry! {
///     runner: "candle-parity",
///     run: run,
///     families: {
///         "mlp" => mlp::Mlp,
///         "transformer" => transformer::Transformer,
///     }
/// }
/// ```
#[macro_export]
macro_rules! port_registry {
    (
        runner: $runner:literal,
        run: $run:ident,
        families: { $($name:literal => $port:ty),* $(,)? }
    ) => {
        /// The built-in families' names, as a run spec's `model.family` gives them.
        pub const FAMILIES: &[&str] = &[$($name),*];

        /// Runs `job` with the port of the built-in family its spec names.
        ///
        /// # Errors
        /// A family this crate has no port for (the message lists those it has), or the
        /// job's.
        pub fn dispatch(
            job: $crate::cli::PortJob<'_>,
        ) -> ::anyhow::Result<$crate::cli::PortDone> {
            let family = job.spec().model.family.clone();
            match family.as_str() {
                $($name => $run::<$port>(job),)*
                other => ::anyhow::bail!(
                    "{} has no built-in model family {other:?} (it has {})",
                    $runner,
                    FAMILIES.join(", ")
                ),
            }
        }
    };
}
