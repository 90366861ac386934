//! Same-state replay of one training step (the `replay` subcommand; the contract is
//! [`parity_common::replay`]).
//!
//! The run's spec and fixture are loaded as for [`crate::train::run`], the parameters and
//! optimizer state are replaced by the given ones, and step k runs once on batch
//! (k − 1) mod batches with the ops of `train`, in the same order: the forward pass of
//! [`Net::forward_tapped`] (the forward of [`Net::forward`] plus a −0.0 tap on each named
//! intermediate, which changes no value and yields the intermediates' gradients), the loss of
//! [`model::loss`], `loss.backward()` and the optimizer step, skipped where
//! `spec.fault.skips(k)` ([`RunOptimizer::update`]). The faults act where they act in
//! `train`. For the transformer the tapped intermediates are every module output and named
//! attention op of [`crate::transformer::Transformer::forward_with`], `tok_emb.out` to the
//! logits `head.out` `[B, T, V]`; a parameter or intermediate a fused op leaves without a
//! gradient is named in the `missing` list ([`NO_GRADIENT_FUSED`]).
//!
//! The optimizer comes from [`Stepper::from_state`]: candle-nn's `SGD` for SGD; for AdamW
//! the hand-written [`crate::optim::ManualAdamW`], started from the given moments with step
//! count k − 1, which for a candle-nn AdamW run (whose moments are private) is the float64-
//! factor copy equal to candle-nn's bit for bit, as the header's `replay_note` says. Adam is
//! refused, as `train` refuses it.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use parity_common::frames::{FrameWriter, RawTensor};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::{finish, intermediate_names, ReplayState};
use parity_common::spec::RunSpec;

use crate::device::{self, state_tensor, to_raw};
use crate::model::{self, Net};
use crate::optim::Stepper;
use crate::train::header_meta;
use crate::transformer::Config;

/// The `missing` reason of a parameter without a gradient in a transformer with a fused op
/// (candle 0.11.0 implements no backward for it).
pub const NO_GRADIENT_FUSED: &str = "no gradient (cut off by a fused op without backward)";

/// Replays step `state.step` (k) of `spec` from `state` and writes to `sink` a `header`
/// frame (as `train`'s, plus `optimizer_impl`, the optimizer that ran, and `replay_note`),
/// one `replay` frame (metadata [`parity_common::replay::replay_meta`]) and an `end` frame with status `complete`.
///
/// The `replay` frame holds every name of [`intermediate_names`]`(spec)`, each flattened in
/// PyTorch layout and the run dtype: the forward intermediates and `loss` (one element),
/// `grad:<intermediate>` (d loss / d intermediate), `grad:<param>` and `after:<param>` (the
/// parameter after the update, or as it was when the fault skips step k). A name candle
/// cannot give is listed in the frame's `missing` metadata instead: for the MLP and CNN
/// there is none; a transformer with a fused op (fused layer norm, last-dimension softmax)
/// gives no `grad:<param>` for the parameters the fused op cuts off from the loss and no
/// `grad:<intermediate>` for the intermediates before it, listed with [`NO_GRADIENT_FUSED`]
/// (the parameters' `after:<param>` is recorded, unchanged by the update).
///
/// The state's parameters are converted to the run dtype (float32 runs take the values as
/// float32, float64 runs the values as they are, i.e. widened from a float32 state).
///
/// # Errors
/// An unavailable device, fixture problems (see [`Net::load`]), a state whose parameters
/// differ from the spec's in names, order or shapes, an optimizer that cannot start from
/// the state (see [`Stepper::from_state`]: Adam, burn's AdamW, moments missing or given to
/// SGD), tensor failures, or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, state: &ReplayState, sink: W) -> Result<()> {
    let k = state.step;
    if k == 0 {
        bail!("the replayed step is counted from 1 (step 0 is the initial state)");
    }
    let dev = device::open(spec.device)?;
    let (net, data) = Net::load(spec, &dev)?;
    set_params(&net, state)?;
    let (mut opt, note) = Stepper::from_state(
        &spec.optimizer,
        net.vars(),
        state.moments.as_ref(),
        spec.fault,
    )?;

    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    opt.describe(&mut header);
    header.insert("replay_note".into(), note.into());
    out.write_meta(header)?;

    let (x, y) = data.batch(k)?;
    let tapped = net.forward_tapped(&x)?;
    let loss = model::loss(spec.loss, &tapped.output, &y, spec.fault)?;
    let grads = loss.backward()?;

    // Everything before the update is copied out first: the update sets the vars in place.
    let mut got: HashMap<String, RawTensor> = HashMap::new();
    for (name, h) in &tapped.forward {
        got.insert(name.clone(), to_raw(h)?);
    }
    got.insert("loss".into(), to_raw(&loss)?);
    for (name, tap) in &tapped.taps {
        if let Some(g) = grads.get(tap) {
            got.insert(format!("grad:{name}"), to_raw(g)?);
        }
    }
    got.extend(net.replay_grads(&grads, spec.dtype)?);
    let net = opt.update(spec, k, net, grads)?;
    got.extend(net.replay_after(spec.dtype)?);

    let mut tensors = Vec::new();
    let mut missing = Vec::new();
    let fused = Config::of(&spec.model).is_some_and(|c| c.has_fused_op());
    for name in intermediate_names(spec) {
        match got.remove(&name) {
            Some(t) => tensors.push((name, t)),
            None => {
                let why = if fused {
                    NO_GRADIENT_FUSED
                } else {
                    "no gradient reached it in candle's backward"
                };
                missing.push((name, why.into()));
            }
        }
    }
    if !got.is_empty() {
        let mut extra: Vec<_> = got.into_keys().collect();
        extra.sort();
        bail!("internal: replay computed intermediates the contract does not name: {extra:?}");
    }
    finish(out, k, &missing, tensors)
}

/// Sets each parameter of `net` to the state's, converted to its dtype.
fn set_params(net: &Net, state: &ReplayState) -> Result<()> {
    set_vars(net.params(), state)
}

/// Sets each `Var` of `params` (a model's parameters by state_dict key, in state_dict order)
/// to the state's parameter of that name, converted to the `Var`'s dtype and device.
///
/// # Errors
/// A state whose parameters differ from `params` in names, order or shapes, or a failing
/// device copy.
pub fn set_vars(params: &[(String, candle_core::Var)], state: &ReplayState) -> Result<()> {
    let ours: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    let theirs: Vec<&str> = state.params.iter().map(|(n, _)| n.as_str()).collect();
    if ours != theirs {
        bail!("the state's parameters {theirs:?} differ from the model's {ours:?}");
    }
    for ((name, var), (_, t)) in params.iter().zip(&state.params) {
        if t.shape != var.dims() {
            bail!(
                "state parameter {name} has shape {:?}, the model's is {:?}",
                t.shape,
                var.dims()
            );
        }
        var.set(&state_tensor(t, var.dtype(), var.device())?)?;
    }
    Ok(())
}
