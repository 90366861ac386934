//! Transformer checks in f64 (see transformer_cases/mod.rs); one process per float type.

// Only the fixture writer, the specs, `train` and the frame decoder of the replay helpers are
// used here.
#[allow(dead_code)]
mod replay_common;
mod tempdir;
mod transformer_cases;

#[test]
fn forward_shapes_and_the_causal_mask() {
    transformer_cases::forward_shapes_and_the_causal_mask("f64");
}

#[test]
fn one_attention_head_by_hand() {
    transformer_cases::one_attention_head_by_hand("f64");
}

#[test]
fn export_after_load_is_the_fixture() {
    transformer_cases::export_after_load_is_the_fixture("f64");
}

#[test]
fn training_is_finite_and_sgd_descends() {
    transformer_cases::training_is_finite_and_sgd_descends("f64");
}

#[test]
fn candle_side_settings_are_refused() {
    transformer_cases::candle_side_settings_are_refused("f64");
}

#[test]
fn tokens_outside_the_vocabulary_are_refused() {
    transformer_cases::tokens_outside_the_vocabulary_are_refused("f64");
}

#[test]
fn taps_name_every_module_output_in_forward_order() {
    transformer_cases::taps_name_every_module_output_in_forward_order("f64");
}
