//! The training loop, written once for every port: forward → loss → `loss.backward()` →
//! `GradientsParams::from_grads` → `optim.step(lr, model, grads)`, one step per batch,
//! streaming one frame per recorded step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use burn::tensor::{Device, TensorData};
use parity_common::burn::{BurnModel, Taps};
use parity_common::frames::{meta, FrameWriter};
use parity_common::guard::{guarded, message};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::ReplayState;
use parity_common::spec::{Fault, FloatType, RunSpec};

use crate::device::{self, Host};
use crate::fixture::Fixture;
use crate::load::Source;
use crate::net::{fixture_sources, flat_output, loss, Data, Net, NetOptimizer};
use crate::optim::Stepper;

/// A port of `spec` loaded from its fixture on its device, and the run's data.
pub struct Started<M> {
    /// The device the run is on (the ndarray device in the run's float type, with autodiff).
    pub dev: Device,
    /// The port and its parameters' map to the spec's state_dict keys.
    pub net: Net<M>,
    /// The batches.
    pub data: Data,
}

impl<M: BurnModel> Started<M> {
    /// Refuses a fault (burn-parity implements none), opens the device, reads the fixture and
    /// its data ([`Data::read`]) and loads port `M` ([`Net::load`]) from the fixture's
    /// parameters, or from the parameters of `state` (a replay's: PyTorch names and layout,
    /// rounded once to the run dtype), and the fixture's buffers.
    ///
    /// # Errors
    /// A fault, a device other than the CPU, an unreadable fixture or data that does not fit
    /// the spec, a state whose parameters are not the spec's, a port that cannot be
    /// initialised or loaded (every missing, unused or misshapen tensor named).
    pub fn new(spec: &RunSpec, state: Option<&ReplayState>) -> Result<Self> {
        if spec.fault != Fault::None {
            bail!("burn-parity implements no faults (the fault suite runs on the candle and PyTorch sides), got {:?}", spec.fault);
        }
        let dev = device::open(spec.device, spec.dtype)?;
        let fixture = Fixture::read(spec)?;
        let data = Data::read(spec, &fixture, &dev)?;
        let mut sources = fixture_sources(spec, &fixture)?;
        if let Some(state) = state {
            let given: Vec<&str> = state.params.iter().map(|(n, _)| n.as_str()).collect();
            let names: Vec<&str> = spec.params.iter().map(|p| p.name.as_str()).collect();
            if given != names {
                bail!("the state's parameters are {given:?}, the model's {names:?}");
            }
            // The fixture's buffers stay; its parameters are the state's.
            sources.drain(..spec.params.len());
            sources.splice(
                0..0,
                state.params.iter().map(|(name, t)| Source {
                    name: name.clone(),
                    shape: t.shape.clone(),
                    values: match spec.dtype {
                        FloatType::F32 => TensorData::new(t.to_f32(), t.shape.clone()),
                        FloatType::F64 => TensorData::new(t.values.clone(), t.shape.clone()),
                    },
                }),
            );
        }
        let net = Net::<M>::load(spec, &sources, &dev)?;
        Ok(Self { dev, net, data })
    }
}

/// Trains port `M` as `spec` says and writes its frames to `sink`: a header (with `port`, the
/// port's Rust type), step 0's frame (the initial parameters), then per step forward (taps
/// inactive) → [`loss`] → `loss.backward()` → burn's optimizer ([`NetOptimizer`]), one `step`
/// frame per recorded step ([`train_steps`]: every recorded parameter by state_dict key,
/// PyTorch layout, run dtype; `loss`; on request `grad:`, and for Adam and AdamW from step 1
/// on `exp_avg:` and `exp_avg_sq:`, burn's `moment_1` and `moment_2` after the update read
/// back from its optimizer record, see [`crate::moments`]), and an `end` frame with status
/// `complete` and `train_seconds`. Step `t` (from 1) trains on batch `(t − 1) mod batches`.
///
/// When burn or the port fails inside the loop (an error or a panic at step k), the stream
/// ends with an `end` frame `{"status": "failed", "step": "k", "error": <the message>}` and
/// this returns `Ok`; the message also goes to stderr.
///
/// # Errors
/// Before the header: as [`Started::new`], or an optimizer burn-parity does not run or a
/// moments request for SGD ([`Stepper::new`]). At any time: a failing sink or a parameter
/// that cannot be read back.
pub fn run<M: BurnModel, W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let Started { dev, net, data } = Started::<M>::new(spec, None)?;
    let mut opt = NetOptimizer::<M>::new(Stepper::new(&spec.optimizer, spec.record.moments)?);
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    let started = std::time::Instant::now();
    let ended = train_steps(spec, &mut out, net, &mut opt, |net, t| {
        let i = data.index(t);
        let output = net.forward(data.input(i), &mut Taps::inactive())?;
        let (shape, flat) = flat_output(spec, output);
        let loss = loss(spec, &shape, flat, &data, i)?;
        let value = Host::read(loss.clone().inner(), spec.dtype)?.scalar()?;
        Ok((value, loss.backward()))
    })?;
    out.flush()?; // every recorded step in the pipe: the time includes handing them over
    let seconds = started.elapsed().as_secs_f64().to_string();
    let end = match ended {
        Ok(()) => meta([
            ("kind", "end".into()),
            ("status", "complete".into()),
            ("train_seconds", seconds),
        ]),
        Err((t, e)) => {
            let error = message(&e);
            eprintln!("step {t} failed: {error}");
            meta([
                ("kind", "end".into()),
                ("status", "failed".into()),
                ("step", t.to_string()),
                ("error", error),
                ("train_seconds", seconds),
            ])
        }
    };
    out.write_meta(end)?;
    out.finish()
}

/// The steps of a training run: step 0's frame (the initial parameters), then per step `t`
/// from 1: `pass(net, t)` (the forward pass, the loss and `loss.backward()`, returning the
/// loss widened to f64 and the gradients), the recorded gradients
/// ([`Parameters::recorded_grads`], read before the update), the update
/// ([`RunOptimizer::update`]) and, for a recorded step, its `step` frame
/// ([`RunOptimizer::write_step`]); progress goes to stderr about ten times per run.
///
/// Returns `Ok(Ok(()))` after the last step, or `Ok(Err((t, e)))` when `pass` or the update
/// failed at step `t` (an error, or a panic inside burn or the port, as
/// `panic: <message>`): every finished step is in `out`. Writes no header and no end frame.
///
/// # Errors
/// A failing sink, or a parameter, gradient or moment that cannot be read back.
pub fn train_steps<O, W, F>(
    spec: &RunSpec,
    out: &mut FrameWriter<W>,
    mut net: O::Params,
    opt: &mut O,
    mut pass: F,
) -> Result<std::result::Result<(), (u32, anyhow::Error)>>
where
    O: RunOptimizer,
    O::Params: Parameters<Grads = burn::tensor::Gradients>,
    W: Write,
    F: FnMut(&O::Params, u32) -> Result<(f64, burn::tensor::Gradients)>,
{
    opt.write_step(out, spec, 0, &net, None, Vec::new())?;
    let progress_every = (spec.steps / 10).max(1);
    for t in 1..=spec.steps {
        let (loss, grads) = match guarded(|| pass(&net, t)) {
            Ok(v) => v,
            Err(e) => return Ok(Err((t, e))),
        };
        let recorded_grads = net.recorded_grads(spec, t, &grads)?;
        net = match guarded(|| opt.update(spec, t, net, grads)) {
            Ok(n) => n,
            Err(e) => return Ok(Err((t, e))),
        };
        if spec.records_step(t) {
            opt.write_step(out, spec, t, &net, Some(loss), recorded_grads)?;
            if t.is_multiple_of(progress_every) || t == spec.steps {
                eprintln!("step {t}/{} loss {loss:.8}", spec.steps);
            }
        }
    }
    Ok(Ok(()))
}

/// Metadata of a `header` frame: framework and version, compiler, device, threads and cargo
/// features (the probe runner writes the same header).
pub fn header_meta(dev: &Device) -> HashMap<String, String> {
    meta([
        ("kind", "header".into()),
        ("framework", "burn".into()),
        ("framework_version", crate::BURN_VERSION.into()),
        ("compiler", env!("PARITY_RUSTC_VERSION").into()),
        ("device_detail", format!("{dev:?}")),
        // burn-ndarray is built without its `rayon` feature: every operation runs on the
        // calling thread.
        ("threads", "1".into()),
        ("features", String::new()),
    ])
}
