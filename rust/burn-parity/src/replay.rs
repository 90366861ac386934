//! Same-state replay of one training step (the `replay` subcommand; the contract is
//! [`parity_common::replay`]), written once for every port.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use burn::optim::GradientsParams;
use burn::tensor::{DType, TensorData};
use parity_common::burn::{BurnModel, Output, Taps};
use parity_common::frames::{FrameWriter, RawTensor};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::{finish, quantity, replay_names, ReplayState, OUTPUT};
use parity_common::spec::{FloatType, RunSpec};

use crate::device::Host;
use crate::net::{flat_output, loss, NetOptimizer};
use crate::optim::Stepper;
use crate::train::{header_meta, Started};

/// The `missing` reason of a tap or parameter the backward pass did not reach.
pub const NO_GRADIENT: &str = "no gradient reached it in burn's backward (unused, or cut off)";

/// Replays step `state.step` (k) of port `M` from `state` and writes to `sink` a `header`
/// frame (as `train`'s, plus `replay_note`, see [`Stepper::start_from`]), one `replay` frame
/// and an `end` frame with status `complete`.
///
/// The port is initialised and the state's parameters (PyTorch names and layout, rounded
/// once to the run dtype) and the fixture's buffers are loaded into it through burn-store
/// exactly as `train` loads the fixture ([`Started::new`]); Adam and AdamW start from the
/// state's moments through burn's record API: burn's optimizer, not a copy of its update,
/// takes the step, with its step counter at k − 1 so that the bias correction is step k's.
/// Step k then runs once on batch (k − 1) mod batches with the taps active: the forward pass,
/// a −0.0 tap on its result (`output`) unless the port names its output itself
/// ([`BurnModel::TAPS_ITS_OUTPUT`]), the loss, `loss.backward()` and burn's update. The frame
/// holds the names of [`replay_names`] (flattened, PyTorch layout, run dtype); a tap or
/// parameter without a gradient is listed in `missing` with [`NO_GRADIENT`].
///
/// # Errors
/// As [`Started::new`]; moments burn does not take exactly, or missing for Adam/AdamW;
/// burn's or the port's errors in the step; an intermediate the replay computed that the
/// contract does not name; a failing sink.
pub fn run<M: BurnModel, W: Write>(spec: &RunSpec, state: &ReplayState, sink: W) -> Result<()> {
    let k = state.step;
    if k == 0 {
        bail!("the replayed step is counted from 1 (step 0 is the initial state)");
    }
    let ty = spec.dtype;
    let Started { dev, net, data } = Started::<M>::new(spec, Some(state))?;
    let mut stepper = Stepper::new(&spec.optimizer, false)?;
    let note = match (&state.moments, stepper.has_moments()) {
        (Some(m), true) => stepper.start_from(&net.params, m, ty)?,
        (None, false) => format!("{}: stateless", stepper.name()),
        (None, true) => bail!("{} needs the moments of step {}", stepper.name(), k - 1),
        (Some(_), false) => bail!(
            "{} keeps no moments, but the state has some",
            stepper.name()
        ),
    };
    let mut opt = NetOptimizer::<M>::new(stepper);

    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    header.insert("replay_note".into(), note);
    out.write_meta(header)?;

    let i = data.index(k);
    let mut taps = Taps::active(&dev);
    let output = net.forward(data.input(i), &mut taps)?;
    let mut out_tap = match M::TAPS_ITS_OUTPUT {
        true => Taps::inactive(),
        false => Taps::active(&dev),
    };
    let output = match output {
        Output::Rank2(t) => Output::Rank2(out_tap.tap(OUTPUT, t)),
        Output::Rank3(t) => Output::Rank3(out_tap.tap(OUTPUT, t)),
        Output::Rank4(t) => Output::Rank4(out_tap.tap(OUTPUT, t)),
    };
    let (shape, flat) = flat_output(spec, output);
    let loss = loss(spec, &shape, flat, &data, i)?;
    let loss_value = Host::read(loss.clone().inner(), ty)?;
    let grads = loss.backward();

    let mut got: HashMap<String, RawTensor> = HashMap::new();
    let named = |path: &str, from_port: bool| {
        if from_port {
            quantity(path)
        } else {
            path.to_string()
        }
    };
    for (t, from_port) in [(&taps, true), (&out_tap, false)] {
        for (path, v) in t.values() {
            got.insert(named(&path, from_port), raw(&v, ty)?);
        }
        for (path, g) in t.grads(&grads) {
            if let Some(g) = g {
                got.insert(format!("grad:{}", named(&path, from_port)), raw(&g, ty)?);
            }
        }
    }
    got.insert("loss".into(), loss_value.into_raw());
    let grads = GradientsParams::from_grads(grads, &net.model);
    got.extend(net.replay_grads(&grads, ty)?);
    let net = opt.update(spec, k, net, grads)?;
    got.extend(net.replay_after(ty)?);

    let mut tensors = Vec::new();
    let mut missing = Vec::new();
    for name in replay_names(&taps.paths(), out_tap.is_active(), &spec.params) {
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

/// A tap's values (row-major) as a frame tensor, checked to be in the run dtype.
fn raw(d: &TensorData, ty: FloatType) -> Result<RawTensor> {
    let err = |e| anyhow::anyhow!("reading a tap back: {e:?}");
    Ok(match (d.dtype(), ty) {
        (DType::F32, FloatType::F32) => RawTensor::from_f32(d.as_slice::<f32>().map_err(err)?),
        (DType::F64, FloatType::F64) => RawTensor::from_f64(d.as_slice::<f64>().map_err(err)?),
        (got, _) => bail!("a {} run produced a tap of dtype {got:?}", ty.name()),
    })
}
