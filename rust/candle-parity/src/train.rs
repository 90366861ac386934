//! The training loop, written once for every port: forward → loss → `loss.backward()` →
//! `opt.step(&grads)`, streaming one frame per recorded step (what a step records is
//! parity-common's [`RunOptimizer::write_step`], the same for every runner).

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use candle_core::Device;
use parity_common::candle::{CandleModel, FixtureStore, Taps};
use parity_common::frames::{meta, FrameWriter};
use parity_common::guard::{guarded, message};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::spec::RunSpec;

use crate::data::{Data, Fixture};
use crate::device::{self, scalar_f64};
use crate::net::{loss, Net};
use crate::optim::Stepper;

/// A port of `spec` built from its fixture on its device, and the run's data.
pub struct Started<M> {
    /// The device the run is on.
    pub dev: Device,
    /// The port and its parameters.
    pub net: Net<M>,
    /// The batches.
    pub data: Data,
}

impl<M: CandleModel> Started<M> {
    /// Opens the device, reads the fixture ([`Fixture::read`]) and builds port `M` over it
    /// ([`Net::build`]).
    ///
    /// # Errors
    /// An unavailable device, an unreadable or unfitting fixture, the port's build.
    pub fn new(spec: &RunSpec) -> Result<Self> {
        let dev = device::open(spec.device)?;
        let fixture = Fixture::read(spec, &dev)?;
        let dtype = device::dtype(spec.dtype);
        let store = FixtureStore::new(spec, &fixture.tensors, dtype, &dev, false)?;
        let net = Net::<M>::build(spec, &store)?;
        Ok(Self {
            dev,
            net,
            data: fixture.data,
        })
    }
}

/// Trains port `M` as `spec` says and writes its frames to `sink`: a header (with `port`, the
/// port's Rust type), one `step` frame per recorded step (step 0 = initial parameters, no
/// loss), and an `end` frame (with `train_seconds`, the wall time of the steps and their
/// recording). Progress goes to stderr about ten times per run.
///
/// Step `t` (from 1) trains on batch `(t − 1) mod batches`: the forward pass (taps
/// inactive), [`loss`], `loss.backward()`, then the optimizer's update
/// ([`RunOptimizer::update`]: skipped at the step a [`parity_common::spec::Fault::SkipUpdate`]
/// names). Each `step` frame holds ([`RunOptimizer::step_tensors`]), after that step's update:
/// every recorded parameter by state_dict key (flattened, PyTorch layout, run dtype, a tied
/// tensor once), `loss` (F64, one element: the loss of that step's forward pass, before the
/// update), and on request `grad:<name>`, `exp_avg:<name>`, `exp_avg_sq:<name>`. A parameter
/// without a gradient (cut off by a fused op without backward) has no `grad:<name>` and is
/// not updated. Non-finite values are recorded as they are; the workflow marks the run as
/// diverged.
///
/// When the framework fails inside the loop (the port's forward pass, the loss, the backward
/// pass or the optimizer's update returns an error or panics at step k), the stream ends
/// with an `end` frame `{"status": "failed", "step": "k", "error": <candle's message>}`
/// and this returns `Ok`: every finished step is in the stream, and the workflow reports the
/// framework's message. The message also goes to stderr (the job's log).
///
/// # Errors
/// Before the header: as [`Started::new`], or an optimizer candle lacks or a recording it
/// cannot give ([`Stepper::new`]). At any time: a failing sink or device copy.
pub fn run<M: CandleModel, W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let Started { dev, mut net, data } = Started::<M>::new(spec)?;
    let mut opt = Stepper::new(
        &spec.optimizer,
        net.params.vars(),
        spec.record.moments,
        spec.fault,
    )?;
    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    opt.write_step(&mut out, spec, 0, &net.params, None, Vec::new())?;
    let progress_every = (spec.steps / 10).max(1);
    // Wall time of the training steps, recording included (benchmarks read it).
    let started = std::time::Instant::now();
    for t in 1..=spec.steps {
        let (x, y) = data.batch(t)?;
        let pass = guarded(|| {
            let output = net.forward(&x, &mut Taps::inactive())?;
            let loss = loss(spec, &output, &y)?;
            let grads = loss.backward()?;
            Ok((loss, grads))
        });
        let (loss, grads) = match pass {
            Ok(v) => v,
            Err(e) => return failed(out, t, &e, started),
        };
        let recorded_grads = net.params.recorded_grads(spec, t, &grads)?;
        // The update steps the Vars in place and hands the parameters back.
        let params = std::mem::take(&mut net.params);
        net.params = match guarded(|| opt.update(spec, t, params, grads)) {
            Ok(p) => p,
            Err(e) => return failed(out, t, &e, started),
        };
        if spec.records_step(t) {
            let loss_value = scalar_f64(&loss)?;
            opt.write_step(
                &mut out,
                spec,
                t,
                &net.params,
                Some(loss_value),
                recorded_grads,
            )?;
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

/// Metadata of a `header` frame: framework and version, compiler, device, threads and cargo
/// features (the probe runner writes the same header).
pub fn header_meta(dev: &Device) -> HashMap<String, String> {
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
