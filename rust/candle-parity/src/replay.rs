//! Same-state replay of one training step (the `replay` subcommand; the contract is
//! [`parity_common::replay`]), written once for every port.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use candle_core::{Tensor, Var};
use parity_common::candle::{CandleModel, Taps};
use parity_common::frames::{FrameWriter, RawTensor};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::{finish, quantity, replay_names, ReplayState, OUTPUT};
use parity_common::spec::RunSpec;

use crate::device::{state_tensor, to_raw};
use crate::net::loss;
use crate::optim::Stepper;
use crate::train::{header_meta, Started};

/// The `missing` reason of a tap or parameter the backward pass did not reach, where the port
/// gives none of its own ([`CandleModel::why_no_gradient`]).
pub const NO_GRADIENT: &str =
    "no gradient reached it in candle's backward (an op without a backward pass, or unused)";

/// Replays step `state.step` (k) of port `M` from `state` and writes to `sink` a `header`
/// frame (as `train`'s, plus `optimizer_impl`, the optimizer that ran, and `replay_note`,
/// see [`Stepper::from_state`]), one `replay` frame (metadata
/// [`parity_common::replay::replay_meta`]) and an `end` frame with status `complete`.
///
/// The port is built from the fixture as in `train`, its parameters set to the state's
/// (converted to the run dtype: float32 runs take the values as float32, float64 runs as
/// they are, i.e. widened from a float32 state), and step k runs once on batch
/// (k − 1) mod batches with the ops of `train`, in the same order, the taps active: the
/// forward pass (each tap adds −0.0 to its intermediate, which changes no value and yields
/// the intermediate's gradient), the runner's own −0.0 tap on the result (`output`) unless
/// the port names its output itself ([`CandleModel::TAPS_ITS_OUTPUT`]), [`loss`],
/// `loss.backward()` and the update (skipped where `spec.fault.skips(k)`,
/// [`RunOptimizer::update`]). The faults act where they act in `train`.
///
/// The `replay` frame holds the names of [`replay_names`] (each flattened in PyTorch layout
/// and the run dtype): `<path>.out` of each tap, `output`, `loss`, `grad:` of each of those,
/// `grad:<param>` and `after:<param>` (the parameter after the update, or as it was when the
/// fault skips step k); a tap or parameter without a gradient is listed in `missing` instead,
/// with the port's reason ([`CandleModel::why_no_gradient`]) or [`NO_GRADIENT`].
///
/// # Errors
/// As [`Started::new`]; a state whose parameters differ from the spec's in names, order or
/// shapes, an optimizer that cannot start from it ([`Stepper::from_state`]: Adam, burn's
/// AdamW, moments missing or given to SGD); the port's or candle's errors in the step; a
/// failing sink.
pub fn run<M: CandleModel, W: Write>(spec: &RunSpec, state: &ReplayState, sink: W) -> Result<()> {
    let k = state.step;
    if k == 0 {
        bail!("the replayed step is counted from 1 (step 0 is the initial state)");
    }
    let Started { dev, net, data } = Started::<M>::new(spec)?;
    set_vars(&net.params.0, state)?;
    let (mut opt, note) = Stepper::from_state(spec, &net.params, state.moments.as_ref())?;

    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    header.insert("replay_note".into(), note.into());
    out.write_meta(header)?;

    let (x, y) = data.batch(k)?;
    let mut taps = Taps::active();
    let output = net.forward(&x, &mut taps)?;
    let output_tap = match M::TAPS_ITS_OUTPUT {
        true => None,
        false => Some(Var::from_tensor(&output.zeros_like()?.neg()?)?),
    };
    let output = match &output_tap {
        Some(tap) => (output + tap.as_tensor())?,
        None => output,
    };
    let loss = loss(spec, &output, &y)?;
    let grads = loss.backward()?;

    // Everything before the update is copied out first: the update sets the Vars in place.
    let mut got: HashMap<String, RawTensor> = HashMap::new();
    let mut forward: Vec<(String, &Tensor, &Var)> = taps
        .recorded()
        .iter()
        .map(|t| (quantity(&t.path), &t.value, &t.var))
        .collect();
    if let Some(tap) = &output_tap {
        forward.push((OUTPUT.into(), &output, tap));
    }
    for (name, value, var) in forward {
        got.insert(name.clone(), to_raw(value)?);
        if let Some(g) = grads.get(var) {
            got.insert(format!("grad:{name}"), to_raw(g)?);
        }
    }
    got.insert("loss".into(), to_raw(&loss)?);
    got.extend(net.params.replay_grads(&grads, spec.dtype)?);
    let params = opt.update(spec, k, net.params, grads)?;
    got.extend(params.replay_after(spec.dtype)?);

    let why = net.port.why_no_gradient().unwrap_or(NO_GRADIENT);
    let mut tensors = Vec::new();
    let mut missing = Vec::new();
    for name in replay_names(&taps.paths(), output_tap.is_some(), &spec.params) {
        match got.remove(&name) {
            Some(t) => tensors.push((name, t)),
            None => missing.push((name, why.to_string())),
        }
    }
    if !got.is_empty() {
        let mut extra: Vec<_> = got.into_keys().collect();
        extra.sort();
        bail!("internal: replay computed intermediates the contract does not name: {extra:?}");
    }
    finish(out, k, &missing, tensors)
}

/// Sets each `Var` of `params` (a model's parameters by state_dict key, in state_dict order)
/// to the state's parameter of that name, converted to the `Var`'s dtype and device.
///
/// # Errors
/// A state whose parameters differ from `params` in names, order or shapes, or a failing
/// device copy.
pub fn set_vars(params: &[(String, Var)], state: &ReplayState) -> Result<()> {
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
