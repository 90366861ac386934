//! The training loop: forward → loss → `loss.backward()` → `GradientsParams::from_grads` →
//! `optim.step(lr, net, grads)`, one step per batch, streaming one frame per recorded step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use burn::optim::GradientsParams;
use burn::tensor::Device;
use parity_common::frames::{meta, FrameWriter, RawTensor};
use parity_common::spec::{Fault, RunSpec};

use crate::device::{self, Host};
use crate::model::{self, Net};
use crate::optim::Stepper;

/// Runs `spec` and writes its frames to `sink`: a header, one `step` frame per recorded
/// step (step 0 = initial parameters, no loss), and an `end` frame. Progress goes to stderr
/// about ten times per run.
///
/// Step `t` (from 1) trains on batch `(t − 1) mod batches`. Each `step` frame holds, after
/// that step's update: every recorded parameter (flattened, PyTorch layout, run dtype),
/// `loss` (F64, one element: the loss of that step's forward pass, before the update,
/// widened from the run dtype), and on request `grad:<name>` (same layout).
///
/// Non-finite values are recorded as they are; the workflow marks the run as diverged.
///
/// # Errors
/// A device other than the CPU, fixture problems (see [`Net::load`]), an optimizer burn-parity
/// does not run or a moments request (see [`Stepper::new`]), a fault (burn-parity implements
/// none), or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    if spec.fault != Fault::None {
        bail!("burn-parity implements no faults (the fault suite runs on the candle and PyTorch sides), got {:?}", spec.fault);
    }
    let dev = device::open(spec.device, spec.dtype)?;
    let mut opt = Stepper::new(&spec.optimizer, spec.record.moments)?;
    let (mut net, data) = Net::load(spec, &dev)?;
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("optimizer_impl".into(), opt.name().into());
    out.write_meta(header)?;

    write_step(&mut out, spec, &net, 0, None, Vec::new())?;
    let progress_every = (spec.steps / 10).max(1);
    for t in 1..=spec.steps {
        let output = net.forward_step(&data, t);
        let loss = model::loss(spec.loss, output, &data, t, &dev);
        let loss_value = Host::read(loss.clone().inner(), spec.dtype)?.scalar()?;
        let grads = loss.backward();
        let recorded_grads = if spec.record.grads && spec.records_step(t) {
            net.export_grads(&grads, spec.dtype)?
        } else {
            Vec::new()
        };
        let grads = GradientsParams::from_grads(grads, &net);
        net = opt.step(net, grads);
        if spec.records_step(t) {
            write_step(&mut out, spec, &net, t, Some(loss_value), recorded_grads)?;
            if t.is_multiple_of(progress_every) || t == spec.steps {
                eprintln!("step {t}/{} loss {loss_value:.8}", spec.steps);
            }
        }
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
    ]))?;
    Ok(())
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

fn write_step<W: Write>(
    out: &mut FrameWriter<W>,
    spec: &RunSpec,
    net: &Net,
    t: u32,
    loss: Option<f64>,
    grads: Vec<(String, Host)>,
) -> Result<()> {
    let mut tensors: Vec<(String, RawTensor)> = Vec::new();
    if let Some(l) = loss {
        tensors.push(("loss".into(), RawTensor::from_f64(&[l])));
    }
    let mut grads: HashMap<String, Host> = grads.into_iter().collect();
    for (name, values) in net.export(spec.dtype)? {
        if !spec.records_tensor(&name) {
            continue;
        }
        if let Some(g) = grads.remove(&name) {
            tensors.push((format!("grad:{name}"), g.into_raw()));
        }
        tensors.push((name, values.into_raw()));
    }
    out.write(
        meta([("kind", "step".into()), ("step", t.to_string())]),
        tensors,
    )
}
