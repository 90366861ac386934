//! `candle-parity`: the workflow's candle runner, the built-in model families and the op
//! probes (the command line is parity_common::cli's, the runner `candle_parity::main`'s).

fn main() -> std::process::ExitCode {
    candle_parity::main::<candle_parity::NoPort>(env!("PARITY_SOURCE_ID"))
}
