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
//!   [`replay_names`] (flattened, PyTorch layout, the run's dtype): the port's named
//!   intermediates (its taps) and `loss` (one element), `grad:` of each of them except
//!   `loss`, `grad:<param>` of each parameter, and `after:<param>`, each parameter after the
//!   update;
//! * an `end` frame with status `complete`.
//!
//! An intermediate a framework cannot give is left out and named, with the reason, in the
//! `replay` frame's `missing` metadata (`name: reason; name: reason`); the workflow reports
//! it as not recorded, never as agreeing.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::spec::{Optimizer, ParamSpec, RunSpec};

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

/// The name of a tap's output among the intermediates: `<path>.out`, as a forward hook on
/// the PyTorch module at `path` names its output (`scripts/parity/own/torch_model.py`,
/// `quantity`).
pub fn quantity(path: &str) -> String {
    format!("{path}.out")
}

/// The name a replay records a port's output under when the port does not name it with a
/// tap of its own ([`replay_names`]): a model's `output`, as the PyTorch side names it.
pub const OUTPUT: &str = "output";

/// Every tensor name a `replay` frame holds, in this order: each tap's `<path>.out` (`taps`,
/// the paths in the order the forward pass first called them), [`OUTPUT`] when `output` is
/// set (the port's forward result, tapped by the runner), `loss`, `grad:` of each of those
/// but `loss`, then per parameter (state_dict order) `grad:<param>` and `after:<param>`. A
/// name the runner cannot give (a tap or a parameter without a gradient) is left out of the
/// frame and listed in its `missing` metadata ([`replay_meta`]).
///
/// The built-in families name their last layer's output with a tap of their own (`fc2.out`,
/// `head.out`), as `scripts/parity/localise/walk.py` expects, and record no `output`; a
/// user's port gets `output` beside its taps.
pub fn replay_names(taps: &[String], output: bool, params: &[ParamSpec]) -> Vec<String> {
    let forward: Vec<String> = taps
        .iter()
        .map(|p| quantity(p))
        .chain(output.then(|| OUTPUT.to_string()))
        .collect();
    let mut out = forward.clone();
    out.push("loss".into());
    out.extend(forward.iter().map(|n| format!("grad:{n}")));
    for p in params {
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

    #[test]
    fn replay_names_put_the_taps_before_the_output() {
        let params = [ParamSpec {
            name: "0.weight".into(),
            shape: vec![2, 2],
        }];
        let taps = ["0".to_string(), "1".to_string()];
        assert_eq!(
            replay_names(&taps, true, &params),
            [
                "0.out",
                "1.out",
                "output",
                "loss",
                "grad:0.out",
                "grad:1.out",
                "grad:output",
                "grad:0.weight",
                "after:0.weight"
            ]
        );
        assert_eq!(
            replay_names(&taps, false, &params),
            [
                "0.out",
                "1.out",
                "loss",
                "grad:0.out",
                "grad:1.out",
                "grad:0.weight",
                "after:0.weight"
            ]
        );
    }
}
