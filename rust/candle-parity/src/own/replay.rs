//! Same-state replay of one step of an own model (`replay`; the contract is
//! [`parity_common::replay`] and [`parity_common::own`]).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use candle_core::Var;
use parity_common::frames::{FrameWriter, RawTensor};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::own::candle::{CandleModel, FixtureStore, Taps};
use parity_common::own::replay_names;
use parity_common::replay::{finish, ReplayState};
use parity_common::spec::RunSpec;

use super::net::{own_loss, OwnFixture, OwnNet, OwnStepper};
use crate::device::{self, to_raw};
use crate::optim::Stepper;
use crate::replay::set_vars;
use crate::train::header_meta;

/// The `missing` reason of a tap or parameter the backward pass did not reach.
pub const NO_GRADIENT: &str =
    "no gradient reached it in candle's backward (an op without a backward pass, or unused)";

/// Replays step `state.step` (k) of port `M` from `state` and writes to `sink` a `header`
/// frame (as `train`'s, plus `replay_note`, see [`Stepper::from_state`]), one `replay`
/// frame and an `end` frame with status `complete`.
///
/// The port is built from the fixture as in `train`, its parameters set to the state's, and
/// step k runs once on batch (k − 1) mod batches with the taps active: the forward pass,
/// the runner's own −0.0 tap on its result (`output`), [`own_loss`], `loss.backward()` and
/// the update (skipped where `spec.fault.skips(k)`). The `replay` frame holds the names of
/// [`replay_names`] (each flattened in PyTorch layout, the run dtype): `<path>.out` of each
/// tap, `output`, `loss`, `grad:<path>.out`, `grad:output`, `grad:<param>` and
/// `after:<param>`; a tap or parameter without a gradient is listed in `missing` with
/// [`NO_GRADIENT`] instead.
///
/// # Errors
/// As [`super::train::run`] before its header; a state whose parameters differ from the
/// spec's, an optimizer that cannot start from it ([`Stepper::from_state`]); the port's or
/// candle's errors in the step; a failing sink.
pub fn run<M: CandleModel, W: Write>(spec: &RunSpec, state: &ReplayState, sink: W) -> Result<()> {
    let k = state.step;
    if k == 0 {
        bail!("the replayed step is counted from 1 (step 0 is the initial state)");
    }
    let dev = device::open(spec.device)?;
    let fixture = OwnFixture::read(spec, &dev)?;
    let store = FixtureStore::new(
        spec,
        &fixture.tensors,
        device::dtype(spec.dtype),
        &dev,
        false,
    )?;
    let net = OwnNet::<M>::build(spec, &store)?;
    set_vars(net.params(), state)?;
    let (stepper, note) = Stepper::from_state(
        &spec.optimizer,
        net.vars(),
        state.moments.as_ref(),
        spec.fault,
    )?;
    let mut opt = OwnStepper::<M>::new(stepper);

    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    header.insert("own_model".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    header.insert("replay_note".into(), note.into());
    out.write_meta(header)?;

    let (x, y) = fixture.data.batch(k)?;
    let mut taps = Taps::active();
    let output = net.forward(&x, &mut taps)?;
    let output_tap = Var::from_tensor(&output.zeros_like()?.neg()?)?;
    let output = (output + output_tap.as_tensor())?;
    let loss = own_loss(spec, &output, &y)?;
    let grads = loss.backward()?;

    // Everything before the update is copied out first: the update sets the Vars in place.
    let mut got: HashMap<String, RawTensor> = HashMap::new();
    let mut forward: Vec<(String, &candle_core::Tensor, &Var)> = taps
        .recorded()
        .iter()
        .map(|t| (parity_common::own::quantity(&t.path), &t.value, &t.var))
        .collect();
    forward.push(("output".into(), &output, &output_tap));
    for (name, value, var) in forward {
        got.insert(name.clone(), to_raw(value)?);
        if let Some(g) = grads.get(var) {
            got.insert(format!("grad:{name}"), to_raw(g)?);
        }
    }
    got.insert("loss".into(), to_raw(&loss)?);
    got.extend(net.replay_grads(&grads, spec.dtype)?);
    let net = opt.update(spec, k, net, grads)?;
    got.extend(net.replay_after(spec.dtype)?);

    let mut tensors = Vec::new();
    let mut missing = Vec::new();
    for name in replay_names(&taps.paths(), &spec.params) {
        match got.remove(&name) {
            Some(t) => tensors.push((name, t)),
            None => missing.push((name, NO_GRADIENT.to_string())),
        }
    }
    if !got.is_empty() {
        let mut extra: Vec<_> = got.into_keys().collect();
        extra.sort();
        bail!("internal: replay computed intermediates the contract does not name: {extra:?}");
    }
    finish(out, k, &missing, tensors)
}
