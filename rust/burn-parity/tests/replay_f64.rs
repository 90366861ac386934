//! Replay self-consistency in f64 (see replay_common/mod.rs); one process per float type.

mod replay_common;
mod tempdir;

#[test]
fn all_cases_replay_their_training_steps() {
    replay_common::all_cases_replay_their_training_steps("f64");
}

#[test]
fn mse_output_gradient_is_two_residuals_over_n() {
    replay_common::mse_output_gradient_is_two_residuals_over_n("f64");
}

#[test]
fn a_negative_zero_tap_keeps_every_bit() {
    replay_common::a_negative_zero_tap_keeps_every_bit("f64");
}

#[test]
fn recorded_moments_are_burns_first_step() {
    replay_common::recorded_moments_are_burns_first_step("f64");
}

#[test]
fn the_transformer_replays_its_training_steps() {
    replay_common::transformer_replays_its_training_steps("f64");
}
