//! The `replay` subcommand: one training step from a given state, with every intermediate
//! (the contract is [`parity_common::replay`]).
//!
//! The net is loaded from the run's spec and fixture ([`Net::load`]), then its parameters are
//! replaced by the state's ([`Net::set_params`], rounded to the run dtype). Adam and AdamW
//! start from the state's moments through burn's own record API ([`Stepper::start_from`],
//! [`crate::moments`]): burn's optimizer, not a copy of its update, takes the step, with its
//! step counter at k − 1 so that the bias correction is step k's. Step k then runs exactly as
//! in `train` ([`crate::train::step`]), with the forward intermediates tapped
//! ([`crate::taps`]).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Result};
use parity_common::frames::{FrameWriter, RawTensor};
use parity_common::optim::{Parameters, RunOptimizer};
use parity_common::replay::{finish, intermediate_names, ReplayState};
use parity_common::spec::{Fault, RunSpec};

use crate::device;
use crate::model::Net;
use crate::optim::Stepper;
use crate::taps::Taps;
use crate::train::{header_meta, step};

/// Replays step `state.step` (k) of `spec` from `state` and writes to `sink`: a `header`
/// frame (as `train`'s, plus `optimizer_impl` and `replay_note`: how burn's optimizer was
/// started), one `replay` frame (metadata from [`parity_common::replay::replay_meta`]) holding the tensors named by
/// [`intermediate_names`] (flattened, PyTorch layout, run dtype; `loss` one element), and an
/// `end` frame with status `complete`.
///
/// The forward quantities are read from the forward pass of step k on batch
/// `(k − 1) mod batches` (for the transformer every module output and named attention op,
/// `tok_emb.out` to the logits `head.out` `[batch, seq_len, vocab]`:
/// [`crate::transformer::Transformer::forward_tapped`]); `grad:<forward name>` from zero taps (see [`crate::taps`]);
/// `grad:<param>` from `loss.backward()`; `after:<param>` after burn's optimizer step. A name
/// burn gives no value for (a parameter or tap no gradient reached) is listed in `missing`.
///
/// # Errors
/// As [`crate::train::run`] for the device, fixture, optimizer and fault; a state whose
/// parameters are not the model's ([`Net::set_params`]); moments burn does not take exactly
/// ([`Stepper::start_from`]); moments missing for Adam/AdamW; an intermediate the replay
/// computed that [`intermediate_names`] does not name (the forward pass and the contract
/// disagree, as candle's replay refuses too); or a failing sink.
pub fn run<W: Write>(spec: &RunSpec, state: &ReplayState, sink: W) -> Result<()> {
    if spec.fault != Fault::None {
        bail!(
            "burn-parity implements no faults, so it replays none, got {:?}",
            spec.fault
        );
    }
    let ty = spec.dtype;
    let dev = device::open(spec.device, ty)?;
    let mut opt = Stepper::new(&spec.optimizer, false)?;
    let (mut net, data) = Net::load(spec, &dev)?;
    let params: Vec<(String, &[f64])> = state
        .params
        .iter()
        .map(|(n, t)| (n.clone(), t.values.as_slice()))
        .collect();
    net.set_params(&params, ty, &dev)?;
    let note = match (&state.moments, opt.has_moments()) {
        (Some(m), true) => opt.start_from(&net.params(), m, ty)?,
        (None, false) => format!("{}: stateless", opt.name()),
        (None, true) => bail!(
            "{} needs the moments of step {}",
            opt.name(),
            state.step - 1
        ),
        (Some(_), false) => bail!("{} keeps no moments, but the state has some", opt.name()),
    };

    let mut out = FrameWriter::new(sink);
    let mut header = header_meta(&dev);
    opt.describe(&mut header);
    header.insert("replay_note".into(), note);
    out.write_meta(header)?;

    let k = state.step;
    let mut taps = Taps::on(&dev);
    let mut found: HashMap<String, RawTensor> = HashMap::new();
    let mut missing: Vec<(String, String)> = Vec::new();
    let (net, loss) = step(
        spec,
        net,
        &data,
        k,
        &mut opt,
        &mut taps,
        |net, taps, grads| {
            for (name, g) in taps.grads(grads, ty)? {
                match g {
                    Some(g) => drop(found.insert(format!("grad:{name}"), g.into_raw())),
                    None => missing.push((format!("grad:{name}"), "no gradient reached it".into())),
                }
            }
            found.extend(net.replay_grads(grads, ty)?);
            Ok(())
        },
    )?;
    found.extend(taps.values(ty)?.into_iter().map(|(n, h)| (n, h.into_raw())));
    found.insert("loss".into(), loss.into_raw());
    found.extend(net.replay_after(ty)?);

    let mut tensors: Vec<(String, RawTensor)> = Vec::new();
    for name in intermediate_names(spec) {
        match found.remove(&name) {
            Some(t) => tensors.push((name, t)),
            None if missing.iter().any(|(n, _)| *n == name) => {}
            None => missing.push((name, "burn-parity computed no value for it".into())),
        }
    }
    if !found.is_empty() {
        // A runner linked against another parity-common (a target folder shared by two
        // checkouts) would otherwise drop the taps its contract does not name, silently.
        let mut extra: Vec<_> = found.into_keys().collect();
        extra.sort();
        bail!("internal: replay computed intermediates the contract does not name: {extra:?}");
    }
    finish(out, k, &missing, tensors)
}
