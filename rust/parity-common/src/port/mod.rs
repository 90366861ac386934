//! The contract of a port: a model written in candle or burn that the runners train, replay
//! and inspect step by step against its PyTorch original. Every model a runner runs is a
//! port: the built-in families are ports inside the runner crates (`candle_parity::families`,
//! `burn_parity::families`), and a user's own model ("bring your own model",
//! docs/own-model.md) is a port in the user's crate, linked into a runner the workflow
//! generates.
//!
//! A port implements one trait, behind a cargo feature so that parity-common stays
//! framework-free without it:
//!
//! * feature `candle`: [`candle::CandleModel`] (build from a `VarBuilder` that serves the
//!   fixture's tensors by state_dict key, forward with [`candle::Taps`]);
//! * feature `burn`: `burn::BurnModel` (for burn 0.22.1: init on a device, loaded by
//!   burn-store from the fixture, forward with `burn::Taps`).
//!
//! The runner library of the framework (`candle_parity::main`, `burn_parity::main`) runs
//! the shared command line ([`crate::cli`]) for a binary: `train`, `probe`, `replay`,
//! `inspect`, `defaults`, `version`, `source-id`. This module holds what is framework-free:
//! the report of `inspect` ([`Inspection`], read by `scripts/parity/train/own_check.py`).
//!
//! **Taps.** A port names its intermediates after the PyTorch model's module paths
//! (`model.layers.0.self_attn`): `taps.tap(path, h)` in its forward pass. In `train` a tap
//! does nothing; in `replay` and `inspect` it returns `h + v` with `v` a zero-valued
//! trainable tensor of `h`'s shape (−0.0, the additive identity of every IEEE 754 value), so
//! that no value changes and the gradient of `v` is d loss / d h. The replay records the
//! first call of each path as `<path>.out` and its gradient as `grad:<path>.out`
//! ([`crate::replay::replay_names`]), the names the PyTorch side's forward hooks give the
//! module's output (`scripts/parity/own/torch_model.py`, `quantity`).

use serde::Serialize;

#[cfg(feature = "burn")]
pub mod burn;
#[cfg(feature = "candle")]
pub mod candle;

/// What `inspect` prints (one JSON object on stdout): the port built from the fixture as
/// `train` builds it, one forward pass and one backward on batch 0.
///
/// `scripts/parity/train/own_check.py` (`judge`) compares it with the PyTorch model before any
/// training job: other parameters, missing ones, other shapes or an output of the wrong
/// shape stop the workflow there, every difference listed; parameters without a gradient are
/// recorded, not refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Inspection {
    /// Every tensor the port asked for that the fixture holds as a parameter: its state_dict
    /// key (after the rename table and the tied aliases) and the shape asked for, in the
    /// order first asked, each once; buffers excluded.
    pub params: Vec<(String, Vec<usize>)>,
    /// Names the port asked for (after the rename table) that the fixture does not hold.
    pub missing: Vec<String>,
    /// `(name, fixture shape, asked shape)` of every tensor asked for with another shape.
    pub shape_mismatch: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// The shape of the port's output on batch 0; `None` when the forward pass did not run.
    pub output_shape: Option<Vec<usize>>,
    /// Parameters (state_dict keys, spec order) without a gradient after that backward (a
    /// fused op without a backward pass cuts the graph silently in candle 0.11).
    pub no_grad: Vec<String>,
    /// Tap paths in the order the forward pass first called them.
    pub taps: Vec<String>,
    /// The port's build failed (or asked for names the fixture lacks or holds with another
    /// shape): the message; nothing else ran.
    pub build_error: Option<String>,
    /// The forward pass or the loss failed: the framework's message.
    pub forward_error: Option<String>,
    /// The backward pass failed: the framework's message.
    pub backward_error: Option<String>,
}

impl Inspection {
    /// The build error an inspection reports for the names asked for that the fixture lacks
    /// or holds with another shape ([`Inspection::missing`], [`Inspection::shape_mismatch`]),
    /// one clause each; `None` when there are none.
    pub fn asked_error(&self) -> Option<String> {
        let mut clauses: Vec<String> = self
            .missing
            .iter()
            .map(|n| format!("the fixture holds no tensor {n:?}"))
            .collect();
        clauses.extend(self.shape_mismatch.iter().map(|(n, have, asked)| {
            format!("{n:?} asked for with shape {asked:?}, the fixture's is {have:?}")
        }));
        (!clauses.is_empty()).then(|| clauses.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inspection_is_the_json_the_check_reads() {
        let i = Inspection {
            params: vec![("0.weight".into(), vec![8, 4])],
            missing: vec!["3.bias".into()],
            shape_mismatch: vec![("2.weight".into(), vec![2, 8], vec![8, 2])],
            output_shape: Some(vec![3, 2]),
            taps: vec!["0".into()],
            ..Inspection::default()
        };
        let v = serde_json::to_value(&i).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "params": [["0.weight", [8, 4]]], "missing": ["3.bias"],
                "shape_mismatch": [["2.weight", [2, 8], [8, 2]]], "output_shape": [3, 2],
                "no_grad": [], "taps": ["0"], "build_error": null, "forward_error": null,
                "backward_error": null
            })
        );
        let why = i.asked_error().unwrap();
        assert!(
            why.contains("\"3.bias\"") && why.contains("[8, 2]"),
            "{why}"
        );
        assert_eq!(Inspection::default().asked_error(), None);
    }
}
