//! An own model's training run (`train`): burn-parity's loop ([`crate::train::train_steps`])
//! around the user's port, and the `failed` end of a stream the framework broke.

use std::io::Write;

use anyhow::Result;
use parity_common::frames::{meta, FrameWriter};
use parity_common::optim::RunOptimizer;
use parity_common::own::burn::{BurnModel, Taps};
use parity_common::spec::RunSpec;

use super::net::{fixture_sources, flat_output, own_loss, OwnData, OwnNet, OwnOptimizer};
use crate::device::{self, Host};
use crate::fixture::Fixture;
use crate::optim::Stepper;
use crate::train::{header_meta, train_steps};

/// Trains port `M` as `spec` says and writes its frames to `sink`, as [`crate::train::run`]
/// does for the built-in families: a header (with `own_model`, the port's Rust type), step
/// 0, then per step forward (taps inactive) → loss ([`own_loss`]) → `loss.backward()` →
/// burn's optimizer ([`OwnOptimizer`]), one `step` frame per recorded step (every recorded
/// parameter by state_dict key, PyTorch layout, run dtype; `loss`; on request `grad:`,
/// `exp_avg:`, `exp_avg_sq:`), and an `end` frame with status `complete`.
///
/// When burn or the port fails inside the loop (an error or a panic at step k), the stream
/// ends with an `end` frame `{"status": "failed", "step": "k", "error": <the message>}` and
/// this returns `Ok`; the message also goes to stderr.
///
/// # Errors
/// Before the header: an unreadable fixture, a port that cannot be initialised or loaded
/// ([`OwnNet::load`]: every missing, unused or misshapen tensor), an optimizer burn-parity
/// does not run. At any time: a failing sink or a parameter that cannot be read back.
pub fn run<M: BurnModel, W: Write>(spec: &RunSpec, sink: W) -> Result<()> {
    let dev = device::open(spec.device, spec.dtype)?;
    let fx = Fixture::read(spec)?;
    let data = OwnData::read(spec, &fx, &dev)?;
    let net = OwnNet::<M>::load(spec, &fixture_sources(spec, &fx)?, &dev)?;
    let mut opt = OwnOptimizer::<M>::new(Stepper::new(&spec.optimizer, spec.record.moments)?);
    let mut out = FrameWriter::new(sink);

    let mut header = header_meta(&dev);
    header.insert("own_model".into(), std::any::type_name::<M>().into());
    opt.describe(&mut header);
    out.write_meta(header)?;

    let started = std::time::Instant::now();
    let ended = train_steps(spec, &mut out, net, &mut opt, |net, t| {
        let i = data.index(t);
        let output = net.forward(data.input(i), &mut Taps::inactive())?;
        let (shape, flat) = flat_output(spec, output)?;
        let loss = own_loss(spec, &shape, flat, &data, i)?;
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

/// The first line of each cause of `e`, joined by `: `: a framework error as one line for a
/// frame or a JSON field.
pub fn message(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string().lines().next().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join(": ")
}
