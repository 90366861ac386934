//! Probe interpreter checks in f64 (see probe_cases/mod.rs); one process per float type.

#[macro_use]
mod probe_cases;

probe_tests!("f64");
