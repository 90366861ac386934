//! The training loop: forward → loss → `loss.backward()` → `opt.step(&grads)`, streaming
//! one frame per recorded step (what a step records is parity-common's
//! [`RunOptimizer::write_step`], the same for every runner).

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use parity_common::frames::{meta, FrameWriter};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::spec::RunSpec;

use crate::device::{self, scalar_f64};
use crate::model::{self, Net};
use crate::optim::Stepper;

/// Runs `spec` and writes its frames to `sink`: a header, one `step` frame per recorded
/// step (step 0 = initial parameters, no loss), and an `end` frame (with `train_seconds`,
/// the wall time of the steps and their recording). Progress goes to stderr
/// about ten times per run.
///
/// Each `step` frame holds ([`RunOptimizer::step_tensors`]), after that step's update: every
/// recorded parameter (flattened,
/// PyTorch layout, run dtype), `loss` (F64, one element: the loss of that step's forward
/// pass, before the update), and on request `grad:<name>`, `exp_avg:<name>`,
/// `exp_avg_sq:<name>`. A parameter without a gradient (a transformer's parameters cut off
/// by a fused op without backward, see [`crate::transformer`]) has no `grad:<name>`; the
/// optimizer leaves it unchanged.
///
/// Non-finite values are recorded as they are; the workflow marks the run as diverged.
///
/// A [`parity_common::spec::Fault`] other than `None` changes the run deliberately (the
/// detection-power suite): `SkipUpdate` skips `opt.step` at its step
/// ([`RunOptimizer::update`]), the others act in the model, the loss or the manual AdamW.
///
/// # Errors
/// Fixture problems (see [`Net::load`]), an unavailable device, unsupported recording
/// requests (see [`Stepper::new`]), tensor failures, or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device)?;
    let (mut net, data) = Net::load(spec, &dev)?;
    let mut opt = Stepper::new(&spec.optimizer, net.vars(), spec.record.moments, spec.fault)?;
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    opt.describe(&mut header);
    out.write_meta(header)?;

    opt.write_step(&mut out, spec, 0, &net, None, Vec::new())?;
    let progress_every = (spec.steps / 10).max(1);
    // Wall time of the training steps, recording included (benchmarks read it).
    let started = std::time::Instant::now();
    for t in 1..=spec.steps {
        let (x, y) = data.batch(t)?;
        let output = net.forward(&x)?;
        let loss = model::loss(spec.loss, &output, &y, spec.fault)?;
        let grads = loss.backward()?;
        let recorded_grads = net.recorded_grads(spec, t, &grads)?;
        net = opt.update(spec, t, net, grads)?;
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

/// Metadata of a `header` frame: framework and version, compiler, device, threads and cargo
/// features (the probe runner writes the same header).
pub fn header_meta(dev: &candle_core::Device) -> HashMap<String, String> {
    meta([
        ("kind", "header".into()),
        ("framework", "candle".into()),
        ("framework_version", crate::CANDLE_VERSION.into()),
        ("compiler", env!("PARITY_RUSTC_VERSION").into()),
        ("device_detail", format!("{dev:?}")),
        ("threads", candle_core::utils::get_num_threads().to_string()),
        ("features", enabled_features().join(",")),
    ])
}

/// The cargo features this binary was built with.
pub fn enabled_features() -> Vec<&'static str> {
    let mut f = Vec::new();
    if cfg!(feature = "cuda") {
        f.push("cuda");
    }
    if cfg!(feature = "metal") {
        f.push("metal");
    }
    if cfg!(feature = "accelerate") {
        f.push("accelerate");
    }
    if cfg!(feature = "mkl") {
        f.push("mkl");
    }
    f
}
