//! `burn-parity`: one training run or one op probe per invocation; the workflow decides which.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use parity_common::probe_spec::ProbeSpec;
use parity_common::spec::RunSpec;

#[derive(Parser)]
#[command(version, about = "burn side of the training-step parity workflow")]
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
    /// Run an op probe (normalized by the workflow) and write one `result` frame per
    /// (case, quantity); burn's panics, missing gradients and ops its API lacks are results,
    /// not failures.
    Probe {
        /// Probe spec JSON written by the workflow.
        #[arg(long)]
        spec: PathBuf,
        /// Where to write the frames; `-` is standard output.
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Print burn's optimizer defaults as JSON, serialised from burn's config types.
    Defaults,
    /// Print the burn version this binary was built with.
    Version,
    /// Print the source id the workflow's build rule embedded (a hash of this runner's
    /// sources), so the rule can check it copied this checkout's binary.
    SourceId,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Train { spec, out } => {
            let spec = RunSpec::from_path(&spec)?;
            burn_parity::train::run(&spec, parity_common::frames::open_sink(&out)?)
        }
        Command::Probe { spec, out } => {
            let spec = ProbeSpec::from_path(&spec)?;
            burn_parity::probe::run(&spec, parity_common::frames::open_sink(&out)?)
        }
        Command::Defaults => {
            let json = burn_parity::optim::defaults_json()?;
            println!("{}", serde_json::to_string_pretty(&json)?);
            Ok(())
        }
        Command::SourceId => {
            println!("{}", env!("PARITY_SOURCE_ID"));
            Ok(())
        }
        Command::Version => {
            println!("{}", burn_parity::BURN_VERSION);
            Ok(())
        }
    }
}
