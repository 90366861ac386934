//! `candle-parity`: one training run or one op probe per invocation; the workflow decides which.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use parity_common::probe_spec::ProbeSpec;
use parity_common::spec::RunSpec;

#[derive(Parser)]
#[command(version, about = "candle side of the training-step parity workflow")]
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
    /// (case, quantity); candle's errors are results, not failures.
    Probe {
        /// Probe spec JSON written by the workflow.
        #[arg(long)]
        spec: PathBuf,
        /// Where to write the frames; `-` is standard output.
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
    /// Print candle-nn's optimizer defaults as JSON, read from the library itself.
    Defaults,
    /// Print the candle-core version this binary was built with.
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
            candle_parity::train::run(&spec, parity_common::frames::open_sink(&out)?)
        }
        Command::Probe { spec, out } => {
            let spec = ProbeSpec::from_path(&spec)?;
            candle_parity::probe::run(&spec, parity_common::frames::open_sink(&out)?)
        }
        Command::Defaults => {
            let d = candle_nn::ParamsAdamW::default();
            let json = serde_json::json!({
                "candle_version": candle_parity::CANDLE_VERSION,
                "AdamW": {
                    "source": "candle_nn::ParamsAdamW::default()",
                    "lr": d.lr, "beta1": d.beta1, "beta2": d.beta2,
                    "eps": d.eps, "weight_decay": d.weight_decay,
                },
                "SGD": {
                    "source": "candle_nn::SGD::new(vars, learning_rate)",
                    "lr": null,
                    "note": "the learning rate is a required argument; there is no momentum, dampening, nesterov or weight_decay",
                },
            });
            println!("{}", serde_json::to_string_pretty(&json)?);
            Ok(())
        }
        Command::SourceId => {
            println!("{}", env!("PARITY_SOURCE_ID"));
            Ok(())
        }
        Command::Version => {
            println!("{}", candle_parity::CANDLE_VERSION);
            Ok(())
        }
    }
}
