//! The training loop: forward → loss → `loss.backward()` → `GradientsParams::from_grads` →
//! `optim.step(lr, net, grads)`, one step per batch, streaming one frame per recorded step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{anyhow, bail, Result};
use burn::tensor::{Device, Gradients};
use parity_common::frames::{meta, FrameWriter};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::probe_spec::catch_panic;
use parity_common::spec::{Fault, RunSpec};

use crate::device::{self, Host};
use crate::model::{self, Data, Net};
use crate::optim::Stepper;
use crate::taps::Taps;

/// Runs `spec` and writes its frames to `sink`: a header, one `step` frame per recorded
/// step (step 0 = initial parameters, no loss), and an `end` frame. Progress goes to stderr
/// about ten times per run.
///
/// Step `t` (from 1) trains on batch `(t − 1) mod batches`. Each `step` frame holds, after
/// that step's update: every recorded parameter (flattened, PyTorch layout, run dtype),
/// `loss` (F64, one element: the loss of that step's forward pass, before the update,
/// widened from the run dtype), and on request (`spec.record`) `grad:<name>` and, for Adam and
/// AdamW from step 1 on, `exp_avg:<name>` and `exp_avg_sq:<name>`: burn's `moment_1` and
/// `moment_2` after the update, read back from its optimizer record (see [`crate::moments`]),
/// same layout.
///
/// Non-finite values are recorded as they are; the workflow marks the run as diverged.
///
/// # Errors
/// A device other than the CPU, fixture problems or a candle-side transformer setting (see
/// [`Net::load`]), an optimizer burn-parity does not run or a moments request for SGD (see
/// [`Stepper::new`]), a fault (burn-parity implements none), or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    if spec.fault != Fault::None {
        bail!("burn-parity implements no faults (the fault suite runs on the candle and PyTorch sides), got {:?}", spec.fault);
    }
    let dev = device::open(spec.device, spec.dtype)?;
    let mut opt = Stepper::new(&spec.optimizer, spec.record.moments)?;
    let (net, data) = Net::load(spec, &dev)?;
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    opt.describe(&mut header);
    out.write_meta(header)?;

    let ended = train_steps(spec, &mut out, net, &mut opt, |net, t| {
        let (loss, grads) = pass(spec, net, &data, t, &mut Taps::off());
        Ok((loss?.scalar()?, grads))
    })?;
    if let Err((t, e)) = ended {
        return Err(e.context(format!("step {t}")));
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    out.finish()
}

/// The steps of a training run, as burn-parity's built-in families and an own model's
/// runner ([`crate::own`]) both run them: step 0's frame (the initial parameters), then per
/// step `t` from 1: `pass(net, t)` (the forward pass, the loss and `loss.backward()`,
/// returning the loss widened to f64 and the gradients), the recorded gradients
/// ([`Parameters::recorded_grads`], read before the update), the update
/// ([`RunOptimizer::update`]) and, for a recorded step, its `step` frame
/// ([`RunOptimizer::write_step`]); progress goes to stderr about ten times per run.
///
/// Returns `Ok(Ok(()))` after the last step, or `Ok(Err((t, e)))` when `pass` or the update
/// failed at step `t` (an error, or a panic inside burn or the port, as
/// `panic: <message>`): every finished step is in `out`, and the caller decides what a
/// framework error means (the built-in runs fail; an own model's run ends its stream with
/// a `failed` end frame). Writes no header and no end frame.
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
    O::Params: Parameters<Grads = Gradients>,
    W: Write,
    F: FnMut(&O::Params, u32) -> Result<(f64, Gradients)>,
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

/// Runs `f`, turning a panic inside burn (or a user's port) into an error
/// ([`parity_common::probe_spec::catch_panic`]: `panic: <message>`).
///
/// # Errors
/// Those of `f`, and a panic.
pub fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_panic(f).unwrap_or_else(|msg| Err(anyhow!(msg)))
}

/// The forward pass of step `t` (from 1) on batch `(t − 1) mod batches` (marking
/// intermediates in `taps`), its loss and `loss.backward()`: the loss (one element, run
/// dtype; an error when it cannot be read back) and the gradients.
fn pass(
    spec: &RunSpec,
    net: &Net,
    data: &Data,
    t: u32,
    taps: &mut Taps,
) -> (Result<Host>, Gradients) {
    let output = net.forward_tapped(data, t, taps);
    let loss = model::loss(spec.loss, output, data, t, data.device());
    let loss_value = Host::read(loss.clone().inner(), spec.dtype);
    (loss_value, loss.backward())
}

/// One training step `t` (from 1) on batch `(t − 1) mod batches`, as `train` and `replay`
/// run it: the forward pass (marking intermediates in `taps`; [`Taps::off`] marks none), the
/// loss, `loss.backward()`, then `inspect(net, taps, grads)` to read gradients before they are
/// handed over, `GradientsParams::from_grads` and `optim.step` ([`RunOptimizer::update`],
/// through [`Stepper`]'s [`RunOptimizer::step`]). Returns the updated net and
/// the loss (one element, run dtype) of the forward pass before the update.
///
/// # Errors
/// When the loss cannot be read back, or those of `inspect`.
pub fn step(
    spec: &RunSpec,
    net: Net,
    data: &Data,
    t: u32,
    opt: &mut Stepper,
    taps: &mut Taps,
    inspect: impl FnOnce(&Net, &Taps, &Gradients) -> Result<()>,
) -> Result<(Net, Host)> {
    let (loss_value, grads) = pass(spec, &net, data, t, taps);
    let loss_value = loss_value?;
    inspect(&net, taps, &grads)?;
    Ok((opt.update(spec, t, net, grads)?, loss_value))
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
