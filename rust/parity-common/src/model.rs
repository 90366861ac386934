//! The model of a run spec ([`ModelSpec`]): which port trains (a built-in family of the
//! runner, or a user's own model), the config its build receives, what a sample's input and
//! target are, and how the fixture's tensors are named for it. Part of the run spec
//! ([`crate::spec`] re-exports every type); `scripts/parity/plan/runspec.py` writes it.
//!
//! The runner knows nothing of a model beyond this: the parameters are the run spec's
//! (`params`, PyTorch state_dict order, read from the PyTorch model by the workflow), and a
//! port asks for them by name (`parity_common::candle::FixtureStore`, burn-store for burn).
//! A built-in family is a port inside the runner's crate, chosen by `family`; a user's model
//! (`family` [`OWN`]) is the port linked into its generated runner.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `family` of a user's own model (docs/own-model.md).
pub const OWN: &str = "own";

/// One tensor: state_dict key and shape in PyTorch layout.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// state_dict key, e.g. `fc1.weight`.
    pub name: String,
    /// Shape, e.g. `[16, 8]` for a Linear 8→16 weight.
    pub shape: Vec<usize>,
}

/// What one sample of a model's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// Token ids: the fixture's `x` is int64 `[batches, B, T]`; a port's forward receives
    /// `[B, T]` (candle: `DType::U32`; burn: an int tensor).
    Tokens,
    /// Floats: the fixture's `x` is float32 `[batches, B, …]`; a port's forward receives
    /// `[B, …]` in the run dtype.
    Float,
}

/// What a model is trained against, and so its loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// The next tokens: `y` int64 `[batches, B, T]`; the output is logits `[B, T, V]` and the
    /// loss the cross-entropy over `[B·T, V]` (mean), as PyTorch's `F.cross_entropy` of the
    /// flattened logits.
    Tokens,
    /// Class labels: `y` int64 `[batches, B]`; the output is logits `[B, C]`, the loss the
    /// cross-entropy (mean).
    Classes,
    /// Float targets: `y` float32 `[batches, B, …]`; the output has the target's shape, the
    /// loss the MSE (mean over every element).
    Float,
}

/// The model of a run: the port, its config, its data and the names of its tensors.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// [`OWN`] for a user's own model (the port linked into the runner); else the name of a
    /// built-in family of the runner's crate (`mlp`, `cnn1d`, `transformer`; each crate's
    /// `families` module lists its own).
    pub family: String,
    /// Handed to the port's build: for an own model verbatim what the workflow read from the
    /// PyTorch side (a `transformers` config's `to_dict()` or a factory's keyword
    /// arguments); for a built-in family its settings from the config (`sizes`,
    /// `conv_impl`, …).
    pub config: serde_json::Value,
    /// What a sample's input is.
    pub input: InputKind,
    /// What the model is trained against (and so the loss).
    pub target: TargetKind,
    /// Tied parameters: alias → the state_dict key it is recorded under (an LM head
    /// sharing the embedding: `{"lm_head.weight": "model.embed_tokens.weight"}`).
    pub tied: BTreeMap<String, String>,
    /// Buffers the fixture hands the port (float32 there, the run dtype in the port), never
    /// trained or recorded.
    pub buffers: Vec<ParamSpec>,
    /// The Rust side's rename table: the name the port asks for → its state_dict key.
    pub rename: BTreeMap<String, String>,
}

impl ModelSpec {
    /// Whether this is a user's own model ([`OWN`]) rather than a built-in family.
    pub fn is_own(&self) -> bool {
        self.family == OWN
    }

    /// The config a port's build receives (see [`ModelSpec::config`]): an own model's
    /// verbatim; a built-in family's with the run's `fault` added where it acts in the
    /// forward pass ([`crate::fault::Fault::in_model`]: `"fault": "transposed_weight"`),
    /// which only a built-in port can apply.
    pub fn port_config(&self, fault: crate::fault::Fault) -> serde_json::Value {
        let mut config = self.config.clone();
        if !self.is_own() && fault.in_model() {
            if let Some(map) = config.as_object_mut() {
                map.insert("fault".into(), fault.name().into());
            }
        }
        config
    }
}
