//! Probe interpreter checks in f32 (see probe_cases/mod.rs); one process per float type.

#[macro_use]
mod probe_cases;

probe_tests!("f32");
