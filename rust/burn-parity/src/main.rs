//! `burn-parity`: the workflow's burn runner, the built-in model families and the op probes
//! (the command line is parity_common::cli's, the runner `burn_parity::main`'s).

fn main() -> std::process::ExitCode {
    burn_parity::main::<burn_parity::NoPort>(env!("PARITY_SOURCE_ID"))
}
