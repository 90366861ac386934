//! A framework's failure as a value, for the runners' loops: a panic inside the framework or a
//! port caught as an error ([`guarded`]), and an error chain as one line for a frame or a JSON
//! field ([`message`]).

use anyhow::{anyhow, Result};

use crate::probe_spec::catch_panic;

/// Runs `f`, turning a panic inside the framework or a port into an error
/// ([`crate::probe_spec::catch_panic`]: `panic: <message>`).
///
/// # Errors
/// Those of `f`, and a panic.
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(anyhow!(msg)))
}

/// The first line of each cause of `e`, joined by `: ` (candle appends backtraces on later
/// lines): a framework error as one line for a frame or a JSON field.
pub fn message(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string().lines().next().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_of_one_line() {
        let err = guarded::<()>(|| panic!("index out of\nbounds")).unwrap_err();
        assert_eq!(message(&err), "panic: index out of bounds");
        let err = anyhow!("first\nbacktrace").context("loading");
        assert_eq!(message(&err), "loading: first");
    }
}
