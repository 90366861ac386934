//! Same-state replay of one training step, for localising the operation at fault
//! (`scripts/parity/localise/walk.py`; docs/localisation.md).
//!
//! The workflow hands every framework the same state: the reference run's parameters after
//! step k − 1 and, for Adam and AdamW, its moments (`exp_avg`, `exp_avg_sq`) with the step
//! count k − 1. The runner loads the run's spec and fixture (model, loss, optimizer, fault,
//! data), replaces the parameters and the optimizer state by the given ones, runs step k on
//! batch (k − 1) mod batches once, and writes:
//!
//! * a `header` frame (as `train` does, plus `optimizer_impl` and `replay_note`: how the
//!   optimizer was started from the given moments, or `""`);
//! * one `replay` frame, metadata `step` = k, holding every intermediate under the names of
//!   [`intermediate_names`] (flattened, PyTorch layout, the run's dtype): the forward
//!   quantities and `loss` (one element), `grad:` of each forward quantity except `loss`,
//!   `grad:<param>` of each parameter, and `after:<param>`, each parameter after the update;
//! * an `end` frame with status `complete`.
//!
//! An intermediate a framework cannot give is left out and named, with the reason, in the
//! `replay` frame's `missing` metadata (`name: reason; name: reason`); the workflow reports
//! it as not recorded, never as agreeing.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::spec::{Activation, Model, Optimizer, RunSpec};

/// One tensor of the state: shape in PyTorch layout and values widened to f64 (exactly, from
/// the float32 state the workflow writes).
#[derive(Debug, Clone, PartialEq)]
pub struct StateTensor {
    /// Shape, e.g. `[16, 8]`.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub values: Vec<f64>,
}

impl StateTensor {
    /// The values rounded to f32 (exact for a float32 state).
    pub fn to_f32(&self) -> Vec<f32> {
        self.values.iter().map(|&v| v as f32).collect()
    }
}

/// The optimizer state of Adam and AdamW: per parameter (state_dict order) its first and
/// second moments, and the number of steps taken (k − 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    /// `exp_avg` of each parameter, in the order of [`RunSpec::params`].
    pub exp_avg: Vec<StateTensor>,
    /// `exp_avg_sq` of each parameter, same order.
    pub exp_avg_sq: Vec<StateTensor>,
    /// Steps already taken (k − 1); the replayed step is the optimizer's step k.
    pub steps_taken: u32,
}

/// What a replay starts from (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayState {
    /// The step to replay, k ≥ 1.
    pub step: u32,
    /// Parameters in state_dict order (the order of [`RunSpec::params`]).
    pub params: Vec<(String, StateTensor)>,
    /// Adam/AdamW moments; `None` for SGD.
    pub moments: Option<Moments>,
}

fn read_tensor(st: &safetensors::SafeTensors<'_>, name: &str, path: &Path) -> Result<StateTensor> {
    let view = st
        .tensor(name)
        .with_context(|| format!("state {} has no tensor {name:?}", path.display()))?;
    let bytes = view.data();
    let values: Vec<f64> = match view.dtype() {
        safetensors::Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        safetensors::Dtype::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunk of 8")))
            .collect(),
        other => bail!(
            "state {}: {name} is {other:?}; expected F32 or F64",
            path.display()
        ),
    };
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        bail!(
            "state {}: {name}[{i}] is {} (a diverged step cannot be replayed)",
            path.display(),
            values[i]
        );
    }
    Ok(StateTensor {
        shape: view.shape().to_vec(),
        values,
    })
}

impl ReplayState {
    /// Reads the state for replaying step `step` of `spec` from a safetensors file holding
    /// every parameter under its state_dict key and, for Adam/AdamW, `exp_avg:<key>` and
    /// `exp_avg_sq:<key>`; F32 or F64 values.
    ///
    /// # Errors
    /// A step of 0, an unreadable file, a missing tensor, a shape other than the spec's, a
    /// non-finite value, or moments given to SGD.
    pub fn from_path(path: &Path, step: u32, spec: &RunSpec) -> Result<Self> {
        if step == 0 {
            bail!("the replayed step is counted from 1 (step 0 is the initial state)");
        }
        let bytes =
            std::fs::read(path).with_context(|| format!("reading state {}", path.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .with_context(|| format!("state {} is not a safetensors file", path.display()))?;
        let mut params = Vec::with_capacity(spec.params.len());
        let mut exp_avg = Vec::new();
        let mut exp_avg_sq = Vec::new();
        let adam = !matches!(spec.optimizer, Optimizer::Sgd { .. });
        for p in &spec.params {
            let check = |t: StateTensor, name: &str| -> Result<StateTensor> {
                if t.shape != p.shape {
                    bail!(
                        "state {}: {name} has shape {:?}, expected {:?}",
                        path.display(),
                        t.shape,
                        p.shape
                    );
                }
                Ok(t)
            };
            params.push((
                p.name.clone(),
                check(read_tensor(&st, &p.name, path)?, &p.name)?,
            ));
            for (prefix, out) in [("exp_avg", &mut exp_avg), ("exp_avg_sq", &mut exp_avg_sq)] {
                let name = format!("{prefix}:{}", p.name);
                let present = st.names().iter().any(|n| **n == name);
                match (adam, present) {
                    (true, _) => out.push(check(read_tensor(&st, &name, path)?, &name)?),
                    (false, true) => bail!(
                        "state {}: {name} given, but SGD has no moments",
                        path.display()
                    ),
                    (false, false) => {}
                }
            }
        }
        let moments = adam.then_some(Moments {
            exp_avg,
            exp_avg_sq,
            steps_taken: step - 1,
        });
        Ok(Self {
            step,
            params,
            moments,
        })
    }
}

/// The names of the forward quantities of `model`, in forward order, `loss` last: for an MLP
/// of L layers `fc1.out`, `relu1.out`, …, `fcL.out` (each layer's output before its
/// activation, then the activation's output; none after the last layer); for the 1-D CNN
/// `conv.out` (`[batch, channels, length − kernel + 1]`, bias included), `relu.out` (same
/// shape), `fc.out` (`[batch, classes]`); for the transformer every module output and
/// named attention op ([`transformer_forward_names`]), the logits `head.out`
/// (`[batch, seq_len, vocab]`) last; for an own model its output `output` (its taps, named
/// after the PyTorch model's module paths when its forward pass runs, come before it: see
/// [`crate::own::replay_names`]). The names follow the PyTorch model's module paths;
/// `scripts/parity/localise/walk.py` defines the same list and the dataflow between them.
pub fn forward_names(model: &Model) -> Vec<String> {
    let act = |a: &Activation| match a {
        Activation::Relu => "relu",
    };
    let mut out = Vec::new();
    match model {
        Model::Mlp { sizes, activation } => {
            let layers = sizes.len() - 1;
            for i in 1..=layers {
                out.push(format!("fc{i}.out"));
                if i < layers {
                    out.push(format!("{}{i}.out", act(activation)));
                }
            }
        }
        Model::Cnn1d { activation, .. } => {
            out.push("conv.out".into());
            out.push(format!("{}.out", act(activation)));
            out.push("fc.out".into());
        }
        Model::Transformer { blocks, .. } => out.extend(transformer_forward_names(*blocks)),
        Model::Own { .. } => out.push("output".into()),
    }
    out.push("loss".into());
    out
}

/// The transformer's named intermediates, in forward order, for `blocks` blocks: each named
/// `<module path>.out` after the PyTorch model's module paths (the parameters' prefixes),
/// as a forward hook on that module would name its output, with the attention's inner ops
/// named as modules of `attn`:
///
/// * `tok_emb.out` `[B, T, d]`, `pos_emb.out` `[T, d]` (their sum is block 0's input);
/// * per block `blocks.{i}.`: `ln1.out`; `attn.q.out`, `attn.k.out`, `attn.v.out` (each
///   `[B, T, d]`, before the split into heads); `attn.scores.out` (`(q·kᵀ)·(1/√dh)` before
///   the causal mask, `[B, H, T, T]`); `attn.softmax.out` (the attention weights, mask and
///   softmax applied, `[B, H, T, T]`); `attn.context.out` (weights·v, heads merged,
///   `[B, T, d]`); `attn.out.out`; `ln2.out`; `mlp.fc1.out` `[B, T, 4d]`; `mlp.gelu.out`
///   `[B, T, 4d]`; `mlp.fc2.out`; then `blocks.{i}.out`, the residual stream after the
///   block;
/// * `ln_f.out`, `head.out` (the logits `[B, T, V]`).
///
/// `scripts/parity/localise/walk.py` (`transformer_dataflow`) gives the same names with what
/// each is computed from.
pub fn transformer_forward_names(blocks: usize) -> Vec<String> {
    let mut out = vec!["tok_emb.out".to_string(), "pos_emb.out".to_string()];
    for i in 0..blocks {
        out.extend(
            [
                "ln1",
                "attn.q",
                "attn.k",
                "attn.v",
                "attn.scores",
                "attn.softmax",
                "attn.context",
                "attn.out",
                "ln2",
                "mlp.fc1",
                "mlp.gelu",
                "mlp.fc2",
            ]
            .iter()
            .map(|m| format!("blocks.{i}.{m}.out")),
        );
        out.push(format!("blocks.{i}.out"));
    }
    out.extend(["ln_f.out".to_string(), "head.out".to_string()]);
    out
}

/// Every tensor name a `replay` frame holds for `spec` (see the module docs): the forward
/// names, `grad:` of each but `loss`, then per parameter `grad:<param>` and `after:<param>`.
pub fn intermediate_names(spec: &RunSpec) -> Vec<String> {
    let forward = forward_names(&spec.model);
    let mut out = forward.clone();
    out.extend(
        forward
            .iter()
            .filter(|n| *n != "loss")
            .map(|n| format!("grad:{n}")),
    );
    for p in &spec.params {
        out.push(format!("grad:{}", p.name));
        out.push(format!("after:{}", p.name));
    }
    out
}

/// Writes the end of a replay's stream: the `replay` frame holding `tensors` (metadata
/// [`replay_meta`]) and the `end` frame with status `complete`; then finishes the writer.
///
/// # Errors
/// As [`crate::frames::FrameWriter::write`] and [`crate::frames::FrameWriter::finish`].
pub fn finish<W: std::io::Write>(
    mut out: crate::frames::FrameWriter<W>,
    step: u32,
    missing: &[(String, String)],
    tensors: Vec<(String, crate::frames::RawTensor)>,
) -> Result<()> {
    out.write(replay_meta(step, missing), tensors)?;
    out.write_meta(crate::frames::meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    out.finish()
}

/// Metadata of the `replay` frame: kind, step and the `missing` list (name → reason).
pub fn replay_meta(step: u32, missing: &[(String, String)]) -> HashMap<String, String> {
    let missing = missing
        .iter()
        .map(|(n, why)| format!("{n}: {why}"))
        .collect::<Vec<_>>()
        .join("; ");
    crate::frames::meta([
        ("kind", "replay".into()),
        ("step", step.to_string()),
        ("missing", missing),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{ConvImpl, GeluImpl, LayerNormImpl, Model, SoftmaxImpl};

    #[test]
    fn forward_names_follow_the_module_paths() {
        let mlp = Model::Mlp {
            sizes: vec![8, 16, 16, 4],
            activation: Activation::Relu,
        };
        assert_eq!(
            forward_names(&mlp),
            [
                "fc1.out",
                "relu1.out",
                "fc2.out",
                "relu2.out",
                "fc3.out",
                "loss"
            ]
        );
        let cnn = Model::Cnn1d {
            in_channels: 1,
            channels: 4,
            kernel: 5,
            length: 16,
            classes: 3,
            activation: Activation::Relu,
            conv_impl: ConvImpl::Conv1d,
        };
        assert_eq!(
            forward_names(&cnn),
            ["conv.out", "relu.out", "fc.out", "loss"]
        );
    }

    #[test]
    fn transformer_names_follow_the_module_paths_in_forward_order() {
        let tf = Model::Transformer {
            vocab: 11,
            d_model: 8,
            heads: 2,
            blocks: 2,
            seq_len: 5,
            layer_norm: LayerNormImpl::Composed,
            softmax: SoftmaxImpl::Generic,
            gelu: GeluImpl::Erf,
        };
        let names = forward_names(&tf);
        let block = |i: usize| {
            [
                "ln1.out",
                "attn.q.out",
                "attn.k.out",
                "attn.v.out",
                "attn.scores.out",
                "attn.softmax.out",
                "attn.context.out",
                "attn.out.out",
                "ln2.out",
                "mlp.fc1.out",
                "mlp.gelu.out",
                "mlp.fc2.out",
            ]
            .iter()
            .map(move |s| format!("blocks.{i}.{s}"))
            .chain([format!("blocks.{i}.out")])
        };
        let want: Vec<String> = ["tok_emb.out", "pos_emb.out"]
            .iter()
            .map(|s| s.to_string())
            .chain(block(0))
            .chain(block(1))
            .chain(
                ["ln_f.out", "head.out", "loss"]
                    .iter()
                    .map(|s| s.to_string()),
            )
            .collect();
        assert_eq!(names, want);
        assert_eq!(names.len(), 2 + 2 * 13 + 3);
        assert_eq!(names[12], "blocks.0.mlp.gelu.out");
        // Every parameter's module has its output among the names (the walk gives each
        // parameter's gradient from its module's output gradient).
        for p in tf.params() {
            let module = p.name.rsplit_once('.').unwrap().0;
            assert!(names.contains(&format!("{module}.out")), "{}", p.name);
        }
    }
}
