//! An own model's training run (`train`): the loop of [`crate::train::run`] around the
//! user's port, and the `failed` end of a stream the framework broke.

use std::io::Write;

use anyhow::Result;
use parity_common::frames::{meta, FrameWriter};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::own::candle::{CandleModel, FixtureStore, Taps};
use parity_common::spec::RunSpec;

use super::net::{guarded, message, own_loss, OwnFixture, OwnNet, OwnStepper};
use crate::device::{self, scalar_f64};
use crate::optim::Stepper;
use crate::train::header_meta;

/// Trains port `M` as `spec` says and writes its frames to `sink`, as
/// [`crate::train::run`] does for the built-in families: a header (with `own_model`, the
/// port's Rust type), step 0, then per step forward (taps inactive) → [`own_loss`] →
/// `loss.backward()` → the optimizer's update ([`RunOptimizer::update`]), one `step` frame
/// per recorded step ([`RunOptimizer::write_step`]: every recorded parameter by state_dict
/// key in PyTorch layout and the run dtype, a tied tensor once, `loss`, on request
/// `grad:`/`exp_avg:`/`exp_avg_sq:`), and an `end` frame with status `complete`. A parameter
/// without a gradient has no `grad:<name>` and is not updated.
///
/// When the framework fails inside the loop (the port's forward pass, the loss, the backward
/// pass or the optimizer's update returns an error or panics at step k), the stream ends
/// with an `end` frame `{"status": "failed", "step": "k", "error": <candle's message>}`
/// and this returns `Ok`: every finished step is in the stream, and the workflow reports the
/// framework's message. The message also goes to stderr (the job's log).
///
/// # Errors
/// Before the header: an unreadable or unfitting fixture ([`OwnFixture::read`],
/// [`FixtureStore::new`]), the port's build ([`OwnNet::build`]), an unavailable device, an
/// optimizer candle lacks ([`Stepper::new`]). At any time: a failing sink or device copy.
pub fn run<M: CandleModel, W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device)?;
    let fixture = OwnFixture::read(spec, &dev)?;
    let store = FixtureStore::new(
        spec,
        &fixture.tensors,
        device::dtype(spec.dtype),
        &dev,
        false,
    )?;
    let mut net = OwnNet::<M>::build(spec, &store)?;
    let data = fixture.data;
    let stepper = Stepper::new(&spec.optimizer, net.vars(), spec.record.moments, spec.fault)?;
    let mut opt = OwnStepper::<M>::new(stepper);
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("own_model".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    opt.write_step(&mut out, spec, 0, &net, None, Vec::new())?;
    let progress_every = (spec.steps / 10).max(1);
    let started = std::time::Instant::now();
    for t in 1..=spec.steps {
        let (x, y) = data.batch(t)?;
        let pass = guarded(|| {
            let output = net.forward(&x, &mut Taps::inactive())?;
            let loss = own_loss(spec, &output, &y)?;
            let grads = loss.backward()?;
            Ok((loss, grads))
        });
        let (loss, grads) = match pass {
            Ok(v) => v,
            Err(e) => return failed(out, t, &e, started),
        };
        let recorded_grads = net.recorded_grads(spec, t, &grads)?;
        // The update steps the Vars in place and hands the net back.
        net = match guarded(|| opt.update(spec, t, net, grads)) {
            Ok(n) => n,
            Err(e) => return failed(out, t, &e, started),
        };
        if spec.records_step(t) {
            let loss_value = scalar_f64(&loss)?;
            opt.write_step(&mut out, spec, t, &net, Some(loss_value), recorded_grads)?;
            if t.is_multiple_of(progress_every) || t == spec.steps {
                eprintln!("step {t}/{} loss {loss_value:.8}", spec.steps);
            }
        }
    }
    out.flush()?; // every recorded step in the pipe: the time includes handing them over
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
        ("train_seconds", started.elapsed().as_secs_f64().to_string()),
    ]))?;
    out.finish()
}

/// Ends the stream after the framework failed at step `t` with `e`: the `failed` end frame
/// (see [`run`]) and the message on stderr.
fn failed<W: Write>(
    mut out: FrameWriter<W>,
    t: u32,
    e: &anyhow::Error,
    started: std::time::Instant,
) -> Result<()> {
    let error = message(e);
    eprintln!("step {t} failed: {error}");
    out.flush()?;
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "failed".into()),
        ("step", t.to_string()),
        ("error", error),
        ("train_seconds", started.elapsed().as_secs_f64().to_string()),
    ]))?;
    out.finish()
}
