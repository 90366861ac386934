//! Probe interpreter checks in f64 (see probe_cases/mod.rs); one process per float type.

mod probe_cases;

#[test]
fn conv1d_grad_is_the_study_value() {
    probe_cases::conv1d_grad_is_the_study_value("f64");
}

#[test]
fn conv2d_grad_is_the_study_value() {
    probe_cases::conv2d_grad_is_the_study_value("f64");
}

#[test]
fn what_burn_lacks_is_unsupported() {
    probe_cases::what_burn_lacks_is_unsupported("f64");
}

#[test]
fn burn_panics_are_framework_errors() {
    probe_cases::burn_panics_are_framework_errors("f64");
}

#[test]
fn views_and_an_sgd_step() {
    probe_cases::views_and_an_sgd_step("f64");
}
