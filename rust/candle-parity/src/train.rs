//! The training loop, written once for every port: forward → loss → `loss.backward()` →
//! `opt.step(&grads)`, streaming one frame per recorded step (what a step records is
//! parity-common's [`RunOptimizer::write_step`], the same for every runner).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use candle_core::backprop::GradStore;
use candle_core::Device;
use parity_common::candle::{CandleModel, FixtureStore, Taps};
use parity_common::frames::{meta, FrameWriter};
use parity_common::guard::{guarded, message};
use parity_common::optim::{Parameters, Recorded, RunOptimizer, Scalars};
use parity_common::schedule::{Order, Scheduler};
use parity_common::spec::{Clip, Reduction, RunSpec};

use crate::data::{Data, Fixture};
use crate::device::{self, scalar_f64};
use crate::net::{loss, Net, Params};
use crate::optim::{clip, Stepper};

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
    let mut opt = match (&spec.training_loop, net.port.optimizer(&net.params.0)?) {
        (Some(_), Some(own)) => Stepper::of_port(own),
        (None, Some(_)) => bail!("the port brings its own optimizer, which runs in a run with a training loop (docs/loop.md, \"Your own loop\")"),
        (_, None) => Stepper::new(spec, &net.params, spec.record.moments)?,
    };
    let mut training_loop = TrainingLoop::new(spec, &mut opt)?;
    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    opt.write_step(&mut out, spec, 0, &net.params, None)?;
    let mut progress = parity_common::progress::Progress::new(spec.steps);
    // Wall time of the training steps, recording included (benchmarks read it).
    let started = std::time::Instant::now();
    for t in 1..=spec.steps {
        let (loss_value, mut grads) = match guarded(|| gradients(spec, &net, &data, t)) {
            Ok(v) => v,
            Err(e) => return failed(out, t, &e, started),
        };
        let scalars = match &mut training_loop {
            Some(l) => match guarded(|| l.before_update(spec, &mut opt, &mut grads, &net, t)) {
                Ok(s) => Some(s),
                Err(e) => return failed(out, t, &e, started),
            },
            None => None,
        };
        let recorded_grads = net.params.recorded_grads(spec, t, &grads)?;
        // The update steps the Vars in place and hands the parameters back.
        let params = std::mem::take(&mut net.params);
        net.params = match guarded(|| opt.update(spec, t, params, grads)) {
            Ok(p) => p,
            Err(e) => return failed(out, t, &e, started),
        };
        if let Some(l) = &mut training_loop {
            if let Err(e) = guarded(|| l.after_update(&mut opt)) {
                return failed(out, t, &e, started);
            }
        }
        if spec.records_step(t) {
            opt.write_step(
                &mut out,
                spec,
                t,
                &net.params,
                Some(Recorded {
                    loss: loss_value,
                    grads: recorded_grads,
                    scalars: scalars.as_ref(),
                }),
            )?;
        }
        progress.step(t, loss_value);
    }
    out.flush()?; // every recorded step in the pipe: the time includes handing them over
    out.write_meta(meta([
        ("kind", "end".into()),
        ("status", "complete".into()),
        ("train_seconds", started.elapsed().as_secs_f64().to_string()),
    ]))?;
    out.finish()
}

/// The forward and backward passes of step `t` (from 1): the loss of each of the run's
/// micro-batches ([`RunSpec::micro_batches`], one without accumulation; the j-th on batch
/// ((t − 1)·k + j) mod batches), each divided by their number k before its backward pass
/// (reduction `mean`, k > 1) or not, the gradients summed in one `GradStore`
/// (`GradStore::extend`). Returns the loss, widened to f64 (the mean of the micro-batches'
/// losses), and the gradients.
///
/// # Errors
/// The port's or candle's.
pub fn gradients<M: CandleModel>(
    spec: &RunSpec,
    net: &Net<M>,
    data: &Data,
    t: u32,
) -> Result<(f64, GradStore)> {
    let k = spec.micro_batches();
    let mean = spec
        .training_loop
        .as_ref()
        .is_some_and(|l| l.accumulate.reduction == Reduction::Mean);
    let mut sum = 0.0;
    let mut acc: Option<GradStore> = None;
    for j in 0..k {
        let (x, y) = data.micro_batch(t, j, k)?;
        let output = net.forward(&x, &mut Taps::inactive())?;
        let l = loss(spec, &output, &y)?;
        sum += scalar_f64(&l)?;
        let scaled = if k > 1 && mean {
            (&l / f64::from(k))?
        } else {
            l
        };
        let g = scaled.backward()?;
        match &mut acc {
            None => acc = Some(g),
            Some(a) => a.extend(g)?,
        }
    }
    let grads = acc.expect("at least one micro-batch");
    Ok((if k == 1 { sum } else { sum / f64::from(k) }, grads))
}

/// The training loop's parts around the optimizer of a run with one (docs/loop.md), as a
/// porter writes them in candle: the scheduler (PyTorch's, [`Scheduler`]) setting each
/// group's learning rate with `opt.set_learning_rate` before the step, the gradient norm and
/// clipping on the `GradStore` ([`crate::optim::clip`]).
pub struct TrainingLoop {
    scheduler: Option<(Scheduler, Order)>,
    clip: Option<Clip>,
}

impl TrainingLoop {
    /// The loop of `spec`, `None` without one; a scheduler is made over the groups' learning
    /// rates and its index-0 values (and OneCycleLR's momenta) set on `opt`.
    ///
    /// # Errors
    /// burn's per-parameter norm clipping ([`Clip::NormPerParameter`], which candle has no
    /// counterpart of); as [`Stepper::set_momenta`].
    pub fn new(spec: &RunSpec, opt: &mut Stepper) -> Result<Option<Self>> {
        let Some(l) = &spec.training_loop else {
            return Ok(None);
        };
        if let Some(Clip::NormPerParameter(_)) = l.clip {
            anyhow::bail!("burn's per-parameter norm clipping is burn's; candle clips by the total norm (clip: {{norm}})");
        }
        // each group's rate when the optimizer was made (a port's own optimizer: its groups)
        let lrs = opt.learning_rates();
        let scheduler = l
            .schedule
            .as_ref()
            .map(|s| (Scheduler::new(&s.kind, &lrs), s.order));
        let mut this = Self {
            scheduler,
            clip: l.clip,
        };
        this.apply(opt)?;
        Ok(Some(this))
    }

    /// The scheduler's learning rates (and momenta) set on `opt`.
    fn apply(&mut self, opt: &mut Stepper) -> Result<()> {
        if let Some((s, _)) = &self.scheduler {
            opt.set_learning_rates(s.lrs());
            if let Some(m) = s.momenta() {
                opt.set_momenta(m)?;
            }
        }
        Ok(())
    }

    /// Before step `t`'s update: the port's own gradient transform where it has one
    /// ([`CandleModel::transform_gradients`]), else the total gradient norm (on a step
    /// `spec` records, or for norm clipping: a full pass over every gradient) and the loop's
    /// clipping; a scheduler stepped first ([`Order::Before`]); the port's own learning rates
    /// for the step where it has them ([`CandleModel::learning_rates`]). Returns the step's
    /// scalars (the learning rates the update uses).
    ///
    /// # Errors
    /// On tensor failures, and the port's.
    pub fn before_update<M: CandleModel>(
        &mut self,
        spec: &RunSpec,
        opt: &mut Stepper,
        grads: &mut GradStore,
        net: &Net<M>,
        t: u32,
    ) -> Result<Scalars> {
        let (grad_norm, clip_coef) = match net.port.transform_gradients(grads, &net.params.0)? {
            Some(own) => (own.grad_norm, own.clip_coef),
            None => self.clip(grads, &net.params, spec.records_step(t))?,
        };
        if let Some((s, Order::Before)) = &mut self.scheduler {
            s.step();
            self.apply(opt)?;
        }
        if let Some(lrs) = net.port.learning_rates(t) {
            opt.set_learning_rates(&lrs);
        }
        Ok(Scalars {
            lrs: opt.learning_rates(),
            grad_norm,
            clip_coef,
        })
    }

    /// The total gradient norm of `params`' gradients in `grads`, widened (0 without one;
    /// computed only where the step is `recorded` or norm clipping needs it, else NaN, which
    /// no frame holds), and the loop's clipping applied: norm clipping's coefficient, widened.
    fn clip(
        &self,
        grads: &mut GradStore,
        params: &Params,
        recorded: bool,
    ) -> Result<(f64, Option<f64>)> {
        let vars = params.vars();
        if !recorded && !matches!(self.clip, Some(Clip::Norm(_))) {
            if let Some(Clip::Value(v)) = self.clip {
                clip::clip_grad_value(grads, &vars, v)?;
            }
            return Ok((f64::NAN, None));
        }
        let norm = clip::total_norm(grads, &vars)?;
        let grad_norm = norm.as_ref().map(clip::widened).transpose()?.unwrap_or(0.0);
        let clip_coef = match (self.clip, &norm) {
            (Some(Clip::Norm(max)), Some(norm)) => Some(clip::widened(&clip::clip_grad_norm(
                grads, &vars, norm, max,
            )?)?),
            (Some(Clip::Value(v)), _) => {
                clip::clip_grad_value(grads, &vars, v)?;
                None
            }
            _ => None,
        };
        Ok((grad_norm, clip_coef))
    }

    /// After the update: a scheduler stepped after it ([`Order::After`], as PyTorch
    /// requires), its next learning rates set.
    ///
    /// # Errors
    /// As [`Stepper::set_momenta`].
    pub fn after_update(&mut self, opt: &mut Stepper) -> Result<()> {
        if let Some((s, Order::After)) = &mut self.scheduler {
            s.step();
            self.apply(opt)?;
        }
        Ok(())
    }
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
