//! Layout checks of the f64 forward pass (see common/mod.rs); one process per float type.

mod common;
// Only the run spec's model and parameters of the replay helpers are used here.
#[allow(dead_code)]
mod replay_common;
mod tempdir;

#[test]
fn linear_from_a_fixture_computes_torch_linear() {
    common::linear_from_a_fixture_computes_torch_linear("f64");
}

#[test]
fn cnn_from_a_fixture_computes_torch_conv1d_relu_flatten_linear() {
    common::cnn_from_a_fixture_computes_torch_conv1d_relu_flatten_linear("f64");
}
