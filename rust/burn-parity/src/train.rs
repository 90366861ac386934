//! The training loop, written once for every port: forward → loss → `loss.backward()` →
//! `GradientsParams::from_grads` → `optim.step(lr, model, grads)`, one step per batch (or
//! per accumulated micro-batches, with the run's schedule and clipping: docs/loop.md),
//! streaming one frame per recorded step.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use burn::module::{Module, ParamGroup, ParamId};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use parity_common::burn::{BurnModel, Taps};
use parity_common::frames::{meta, FrameWriter};
use parity_common::guard::{guarded, message};
use parity_common::optim::{Parameters, Recorded, RunOptimizer, Scalars};
use parity_common::replay::ReplayState;
use parity_common::schedule::Order;
use parity_common::spec::{Clip, Fault, FloatType, Reduction, RunSpec};

use crate::clip;
use crate::device::{self, Host};
use crate::fixture::Fixture;
use crate::load::{ParamInfo, Source};
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
/// port's Rust type), step 0's frame (the initial parameters), then per step the gradients
/// ([`gradients`]), the training loop's part before the update where the run has one
/// ([`TrainingLoop::before_update`]), burn's optimizer ([`NetOptimizer`]), one `step`
/// frame per recorded step ([`train_steps`]: every recorded parameter by state_dict key,
/// PyTorch layout, run dtype; `loss`; on request `grad:`, and for Adam and AdamW from step 1
/// on `exp_avg:` and `exp_avg_sq:`, burn's `moment_1` and `moment_2` after the update read
/// back from its optimizer record, see [`crate::moments`]; the loop's scalars where it has
/// one), and an `end` frame with status `complete` and `train_seconds`.
///
/// When burn or the port fails inside the loop (an error or a panic at step k), the stream
/// ends with an `end` frame `{"status": "failed", "step": "k", "error": <the message>}` and
/// this returns `Ok`; the message also goes to stderr.
///
/// # Errors
/// Before the header: as [`Started::new`], an optimizer burn-parity does not run or a
/// moments request for SGD ([`Stepper::for_run`]), a schedule burn refuses
/// ([`TrainingLoop::new`]). At any time: a failing sink or a parameter that cannot be read
/// back.
pub fn run<M: BurnModel, W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let Started { dev, net, data } = Started::<M>::new(spec, None)?;
    let groups = group_ids(spec, &net.params)?;
    let stepper = Stepper::for_run(spec, &groups, spec.record.moments)?;
    let training_loop = TrainingLoop::new(spec, &groups)?;
    let mut opt = NetOptimizer::<M>::new(stepper);
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("port".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    let started = std::time::Instant::now();
    let ended = train_steps(spec, &mut out, net, &mut opt, training_loop, |net, t| {
        gradients(spec, net, &data, t)
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

/// The forward and backward passes of step `t` (from 1), as a burn user writes them: per
/// micro-batch ([`RunSpec::micro_batches`]; one without accumulation, on batch
/// `(t − 1) mod batches`; else the j-th of k on batch `((t − 1)·k + j) mod batches`) the
/// port's forward pass (taps inactive), [`loss`], divided by k (`div_scalar`, reduction
/// `mean`, k > 1) or not, `loss.backward()` and `GradientsParams::from_grads`, summed over
/// the micro-batches by burn's `GradientsAccumulator`. Returns the loss widened to f64 (the
/// mean of the micro-batches' losses) and the gradients.
///
/// # Errors
/// The port's or burn's.
pub fn gradients<M: BurnModel>(
    spec: &RunSpec,
    net: &Net<M>,
    data: &Data,
    t: u32,
) -> Result<(f64, GradientsParams)> {
    let k = spec.micro_batches();
    let mean = spec
        .training_loop
        .as_ref()
        .is_some_and(|l| l.accumulate.reduction == Reduction::Mean);
    let pass = |i: usize| -> Result<(f64, Tensor<1>)> {
        let output = net.forward(data.input(i), &mut Taps::inactive())?;
        let (shape, flat) = flat_output(spec, output);
        let loss = loss(spec, &shape, flat, data, i)?;
        let value = Host::read(loss.clone().inner(), spec.dtype)?.scalar()?;
        Ok((value, loss))
    };
    if k == 1 {
        let (value, loss) = pass(data.index(t))?;
        return Ok((
            value,
            GradientsParams::from_grads(loss.backward(), &net.model),
        ));
    }
    let mut acc = GradientsAccumulator::<M>::new();
    let mut sum = 0.0;
    for j in 0..k {
        let (value, loss) = pass(data.micro_index(t, j, k))?;
        sum += value;
        let loss = if mean {
            loss.div_scalar(f64::from(k))
        } else {
            loss
        };
        acc.accumulate(
            &net.model,
            GradientsParams::from_grads(loss.backward(), &net.model),
        );
    }
    Ok((sum / f64::from(k), acc.grads()))
}

/// Each parameter group's burn ids: the loop's groups (by state_dict key) looked up in
/// `params`; one group of every parameter without a loop.
///
/// # Errors
/// A group naming a parameter the port does not have.
pub fn group_ids(spec: &RunSpec, params: &[ParamInfo]) -> Result<Vec<Vec<ParamId>>> {
    spec.groups()
        .iter()
        .map(|g| {
            g.params
                .iter()
                .map(|name| {
                    params
                        .iter()
                        .find(|p| p.name == *name)
                        .map(|p| p.id)
                        .with_context(|| {
                            format!("parameter group names {name:?}, which the port does not have")
                        })
                })
                .collect()
        })
        .collect()
}

/// The training loop's parts around burn's optimizer in a run with one (docs/loop.md), as a
/// burn user writes them: a `ModuleLrScheduler` ([`crate::schedule`]) stepped once before
/// each optimizer step for every group's learning rate; PyTorch's total-norm clipping
/// composed on the `GradientsParams` ([`crate::clip`]), or burn's own clipping inside the
/// optimizer ([`Stepper::for_run`]).
pub struct TrainingLoop {
    scheduler: ModuleLrScheduler,
    clip: Option<Clip>,
    /// One parameter of each group, whose learning rate is the group's scalar.
    representatives: Vec<ParamId>,
}

impl TrainingLoop {
    /// The loop of `spec` over the groups `groups` ([`group_ids`]), `None` without one. A
    /// scheduler stepped before the optimizer ([`Order::Before`]) is stepped once here,
    /// before the first step, as a port that reads its first rate early does.
    ///
    /// # Errors
    /// As [`crate::schedule::module_scheduler`].
    pub fn new(spec: &RunSpec, groups: &[Vec<ParamId>]) -> Result<Option<Self>> {
        let Some(l) = &spec.training_loop else {
            return Ok(None);
        };
        let lrs: Vec<(ParamGroup, f64)> = groups
            .iter()
            .zip(&l.groups)
            .map(|(ids, g)| (ParamGroup::from_ids(ids.clone()), g.lr))
            .collect();
        let kind = l.schedule.as_ref().map(|s| &s.kind);
        let (mut scheduler, _) = crate::schedule::module_scheduler(kind, &lrs)?;
        if l.schedule
            .as_ref()
            .is_some_and(|s| s.order == Order::Before)
        {
            scheduler.step();
        }
        Ok(Some(Self {
            scheduler,
            clip: l.clip,
            representatives: groups.iter().map(|g| g[0]).collect(),
        }))
    }

    /// Before the update: the total gradient norm of `model`'s gradients in `grads` (on a
    /// `recorded` step, or for PyTorch's norm clipping: a full pass over every gradient; NaN,
    /// which no frame holds, otherwise), PyTorch's norm clipping where the loop has it
    /// ([`Clip::Norm`]), and the scheduler's learning rates for this step set on `opt`;
    /// returns the step's scalars.
    ///
    /// # Errors
    /// A norm that cannot be read back.
    pub fn before_update<M: Module>(
        &mut self,
        opt: &mut Stepper,
        model: &M,
        grads: &mut GradientsParams,
        ty: FloatType,
        recorded: bool,
    ) -> Result<Scalars> {
        let widen = |t: &Tensor<1>| Host::read(t.clone(), ty)?.scalar();
        let wanted = recorded || matches!(self.clip, Some(Clip::Norm(_)));
        let norm = if wanted {
            clip::total_norm(model, grads)
        } else {
            None
        };
        let grad_norm = match &norm {
            Some(n) => widen(n)?,
            None if wanted => 0.0,
            None => f64::NAN,
        };
        let clip_coef = match (self.clip, &norm) {
            (Some(Clip::Norm(max)), Some(norm)) => {
                Some(widen(&clip::clip_grad_norm(model, grads, norm, max))?)
            }
            _ => None,
        };
        opt.set_learning_rate(self.scheduler.step());
        Ok(Scalars {
            lrs: self
                .representatives
                .iter()
                .map(|&id| opt.learning_rate(id))
                .collect(),
            grad_norm,
            clip_coef,
        })
    }
}

/// The steps of a training run: step 0's frame (the initial parameters), then per step `t`
/// from 1: `pass(net, t)` (the forward and backward passes, returning the loss widened to
/// f64 and the gradients), the loop's part before the update ([`TrainingLoop::before_update`],
/// where the run has a loop), the recorded gradients ([`Parameters::recorded_grads`], read
/// before the update), the update ([`RunOptimizer::update`]) and, for a recorded step, its
/// `step` frame ([`RunOptimizer::write_step`], with the loop's scalars); progress goes to
/// stderr about ten times per run.
///
/// Returns `Ok(Ok(()))` after the last step, or `Ok(Err((t, e)))` when `pass`, the loop or
/// the update failed at step `t` (an error, or a panic inside burn or the port, as
/// `panic: <message>`): every finished step is in `out`. Writes no header and no end frame.
///
/// # Errors
/// A failing sink, or a parameter, gradient or moment that cannot be read back.
pub fn train_steps<M, W, F>(
    spec: &RunSpec,
    out: &mut FrameWriter<W>,
    mut net: Net<M>,
    opt: &mut NetOptimizer<M>,
    mut training_loop: Option<TrainingLoop>,
    mut pass: F,
) -> Result<std::result::Result<(), (u32, anyhow::Error)>>
where
    M: Module,
    W: Write,
    F: FnMut(&Net<M>, u32) -> Result<(f64, GradientsParams)>,
{
    opt.write_step(out, spec, 0, &net, None)?;
    let mut progress = parity_common::progress::Progress::new(spec.steps);
    for t in 1..=spec.steps {
        let (loss, mut grads) = match guarded(|| pass(&net, t)) {
            Ok(v) => v,
            Err(e) => return Ok(Err((t, e))),
        };
        let scalars = match &mut training_loop {
            Some(l) => {
                let recorded = spec.records_step(t);
                match guarded(|| {
                    l.before_update(&mut opt.inner, &net.model, &mut grads, spec.dtype, recorded)
                }) {
                    Ok(s) => Some(s),
                    Err(e) => return Ok(Err((t, e))),
                }
            }
            None => None,
        };
        let recorded_grads = net.recorded_grads(spec, t, &grads)?;
        net = match guarded(|| opt.update(spec, t, net, grads)) {
            Ok(n) => n,
            Err(e) => return Ok(Err((t, e))),
        };
        if spec.records_step(t) {
            opt.write_step(
                out,
                spec,
                t,
                &net,
                Some(Recorded {
                    loss,
                    grads: recorded_grads,
                    scalars: scalars.as_ref(),
                }),
            )?;
        }
        progress.step(t, loss);
    }
    Ok(Ok(()))
}

/// Metadata of a `header` frame: framework and version, compiler, device, threads and cargo
/// features (the probe runner writes the same header).
pub fn header_meta(dev: &Device) -> HashMap<String, String> {
    meta([
        ("kind", "header".into()),
        ("framework", "burn".into()),
        ("framework_version", crate::BURN_RELEASE.into()),
        ("compiler", env!("PARITY_RUSTC_VERSION").into()),
        ("device_detail", format!("{dev:?}")),
        // burn's CPU backend (ndarray or Flex) is built without its `rayon` feature: every
        // operation runs on the calling thread.
        ("threads", "1".into()),
        // The cargo feature that chose burn's backend (`ndarray` or `flex`).
        ("features", crate::BURN_BACKEND.into()),
    ])
}
