//! The check of a port before any training job (`inspect`; read by
//! `scripts/parity/train/own_check.py`).

use anyhow::Result;
use parity_common::candle::{CandleModel, FixtureStore, Taps};
use parity_common::guard::{guarded, message};
use parity_common::spec::RunSpec;
use parity_common::Inspection;

use crate::data::Fixture;
use crate::device;
use crate::net::{loss, Net};

/// Builds port `M` from the fixture as `train` does (in the spec's dtype, on its device),
/// runs one forward pass (taps active) and one backward pass on batch 0, and reports what
/// happened ([`Inspection`]).
///
/// The store is lenient here: a name the fixture lacks, or one asked for with another
/// shape, is served as zeros so that the build goes on and every such name is listed; the
/// inspection then reports them as its `build_error` (one clause each, see
/// [`Inspection::asked_error`]) and runs nothing else. Otherwise the port's build error,
/// its forward (or loss) error and its backward error are the framework's messages, each
/// stopping what follows it; after a backward pass, `no_grad` lists the parameters
/// (state_dict order) without a gradient.
///
/// # Errors
/// Only what prevents an inspection: an unavailable device, an unreadable fixture, or one
/// that lacks the spec's parameters or data ([`Fixture::read`], [`FixtureStore::new`]).
pub fn run<M: CandleModel>(spec: &RunSpec) -> Result<Inspection> {
    let dev = device::open(spec.device)?;
    let fixture = Fixture::read(spec, &dev)?;
    let dtype = device::dtype(spec.dtype);
    let store = FixtureStore::new(spec, &fixture.tensors, dtype, &dev, true)?;
    let built = Net::<M>::build_port(spec, &store);
    let asked = store.asked();
    let mut inspection = Inspection {
        params: asked.params,
        missing: asked.missing,
        shape_mismatch: asked.shape_mismatch,
        ..Inspection::default()
    };
    let build_error = built.as_ref().err().map(message);
    inspection.build_error = match (inspection.asked_error(), build_error) {
        (Some(asked), Some(build)) => Some(format!("{asked}; then the build failed: {build}")),
        (asked, build) => asked.or(build),
    };
    let net = match built {
        Ok(port) if inspection.build_error.is_none() => Net {
            port,
            params: crate::net::Params(store.params().to_vec()),
        },
        _ => return Ok(inspection),
    };

    let (x, y) = fixture.data.batch(1)?;
    let mut taps = Taps::active();
    let forward = net.forward(&x, &mut taps).map(|out| {
        let shape = out.dims().to_vec();
        (shape, loss(spec, &out, &y))
    });
    inspection.taps = taps.paths();
    let loss = match forward {
        Err(e) => {
            inspection.forward_error = Some(message(&e));
            return Ok(inspection);
        }
        Ok((shape, loss)) => {
            inspection.output_shape = Some(shape);
            match loss {
                Ok(l) => l,
                Err(e) => {
                    inspection.forward_error = Some(message(&e));
                    return Ok(inspection);
                }
            }
        }
    };
    match guarded(|| Ok(loss.backward()?)) {
        Err(e) => inspection.backward_error = Some(message(&e)),
        Ok(grads) => {
            inspection.no_grad = net
                .params
                .0
                .iter()
                .filter(|(_, var)| grads.get(var).is_none())
                .map(|(name, _)| name.clone())
                .collect();
        }
    }
    Ok(inspection)
}
