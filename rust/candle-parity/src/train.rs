//! The training loop: forward → loss → `loss.backward()` → `opt.step(&grads)`, streaming
//! one frame per recorded step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context, Result};
use parity_common::frames::{meta, FrameWriter, RawTensor};
use parity_common::spec::RunSpec;

use crate::device::{self, scalar_f64, to_raw};
use crate::model::{self, Net};
use crate::optim::Stepper;

/// Runs `spec` and writes its frames to `sink`: a header, one `step` frame per recorded
/// step (step 0 = initial parameters, no loss), and an `end` frame (with `train_seconds`,
/// the wall time of the steps and their recording). Progress goes to stderr
/// about ten times per run.
///
/// Each `step` frame holds, after that step's update: every recorded parameter (flattened,
/// PyTorch layout, run dtype), `loss` (F64, one element: the loss of that step's forward
/// pass, before the update), and on request `grad:<name>`, `exp_avg:<name>`,
/// `exp_avg_sq:<name>`. A parameter without a gradient (a transformer's parameters cut off
/// by a fused op without backward, see [`crate::transformer`]) has no `grad:<name>`; the
/// optimizer leaves it unchanged.
///
/// Non-finite values are recorded as they are; the workflow marks the run as diverged.
///
/// A [`parity_common::spec::Fault`] other than `None` changes the run deliberately (the
/// detection-power suite): `SkipUpdate` skips `opt.step` at its step here, the others act in
/// the model, the loss or the manual AdamW.
///
/// # Errors
/// Fixture problems (see [`Net::load`]), an unavailable device, unsupported recording
/// requests (see [`Stepper::new`]), tensor failures, or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device)?;
    let (net, data) = Net::load(spec, &dev)?;
    let mut opt = Stepper::new(&spec.optimizer, net.vars(), spec.record.moments, spec.fault)?;
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("optimizer_impl".into(), optimizer_impl(&opt).into());
    out.write_meta(header)?;

    write_step(&mut out, spec, &net, &opt, 0, None, None)?;
    let progress_every = (spec.steps / 10).max(1);
    // Wall time of the training steps, recording included (benchmarks read it).
    let started = std::time::Instant::now();
    for t in 1..=spec.steps {
        let (x, y) = data.batch(t)?;
        let output = net.forward(&x)?;
        let loss = model::loss(spec.loss, &output, &y, spec.fault)?;
        let grads = loss.backward()?;
        if !spec.fault.skips(t) {
            opt.step(&grads)?;
        }
        if spec.records_step(t) {
            let loss_value = scalar_f64(&loss)?;
            write_step(
                &mut out,
                spec,
                &net,
                &opt,
                t,
                Some(loss_value),
                Some(&grads),
            )?;
            if t.is_multiple_of(progress_every) || t == spec.steps {
                eprintln!("step {t}/{} loss {loss_value:.8}", spec.steps);
            }
        }
    }
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
        ("train_seconds", started.elapsed().as_secs_f64().to_string()),
    ]))?;
    Ok(())
}

fn write_step<W: Write>(
    out: &mut FrameWriter<W>,
    spec: &RunSpec,
    net: &Net,
    opt: &Stepper,
    t: u32,
    loss: Option<f64>,
    grads: Option<&candle_core::backprop::GradStore>,
) -> Result<()> {
    let mut tensors: Vec<(String, RawTensor)> = Vec::new();
    if let Some(l) = loss {
        tensors.push(("loss".into(), RawTensor::from_f64(&[l])));
    }
    for (i, (name, var)) in net.params().iter().enumerate() {
        if !spec.records_tensor(name) {
            continue;
        }
        tensors.push((name.clone(), to_raw(var.as_tensor())?));
        if spec.record.grads {
            if let Some(g) = grads.and_then(|g| g.get(var)) {
                tensors.push((format!("grad:{name}"), to_raw(g)?));
            }
        }
        if spec.record.moments && t > 0 {
            let (m, v) = opt
                .moments(i)
                .context("moments requested but not exposed by this optimizer")?;
            tensors.push((format!("exp_avg:{name}"), to_raw(m)?));
            tensors.push((format!("exp_avg_sq:{name}"), to_raw(v)?));
        }
    }
    out.write(
        meta([("kind", "step".into()), ("step", t.to_string())]),
        tensors,
    )
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

/// The `optimizer_impl` header entry: the type that steps (`candle_nn::SGD`,
/// `candle_nn::AdamW`, `candle_parity::optim::ManualAdamW`).
pub fn optimizer_impl(opt: &Stepper) -> &'static str {
    match opt {
        Stepper::Sgd(_) => "candle_nn::SGD",
        Stepper::AdamW(_) => "candle_nn::AdamW",
        Stepper::Manual(_) => "candle_parity::optim::ManualAdamW",
    }
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
