//! The check of a port before any training job (`inspect`; read by
//! `scripts/parity/train/own_check.py`).

use anyhow::Result;
use burn::optim::GradientsParams;
use parity_common::burn::{BurnModel, Taps};
use parity_common::guard::{guarded, message};
use parity_common::spec::RunSpec;
use parity_common::Inspection;

use crate::device;
use crate::fixture::Fixture;
use crate::load::param_infos;
use crate::net::{fixture_sources, flat_output, init_and_load, loss, Data, Net};

/// Initialises port `M` and loads the fixture into it as `train` does (burn-store, see
/// [`crate::load`]), runs one forward pass (taps active) and one backward pass on batch 0,
/// and reports what happened ([`Inspection`]).
///
/// `params` are the port's parameters a fixture tensor reached (state_dict key, the port's
/// shape in PyTorch layout, module order); `missing` the port's parameters none reached
/// (burn-store's `missing`, by the PyTorch-style name looked up); `shape_mismatch` burn-store's
/// shape errors (state_dict key, fixture shape, the port's shape, PyTorch layout). Any of
/// those, a fixture tensor that reached no parameter (burn-store's `unused`) or another
/// burn-store error is the `build_error` (one clause each), and nothing else runs.
/// Otherwise the forward (or loss) error and the backward error are burn's messages; after
/// a backward pass, `no_grad` lists the parameters (state_dict order) without a gradient.
///
/// # Errors
/// Only what prevents an inspection: an unavailable device, an unreadable fixture or one
/// without the spec's tensors or data.
pub fn run<M: BurnModel>(spec: &RunSpec) -> Result<Inspection> {
    let dev = device::open(spec.device, spec.dtype)?;
    let fx = Fixture::read(spec)?;
    let data = Data::read(spec, &fx, &dev)?;
    let sources = fixture_sources(spec, &fx)?;
    let mut inspection = Inspection::default();
    let (model, loaded) = match init_and_load::<M>(spec, &sources, &dev) {
        Ok(v) => v,
        Err(e) => {
            inspection.build_error = Some(message(&e));
            return Ok(inspection);
        }
    };
    inspection.params = loaded
        .params
        .iter()
        .map(|(k, p)| (k.clone(), p.torch_shape()))
        .collect();
    inspection.missing = loaded.missing.clone();
    inspection.shape_mismatch = loaded.shape_mismatch.clone();
    inspection.build_error = match (inspection.asked_error(), loaded.other_problems()) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    if inspection.build_error.is_some() {
        return Ok(inspection);
    }
    let names: Vec<String> = spec.params.iter().map(|p| p.name.clone()).collect();
    let net = Net {
        model,
        params: param_infos(&loaded, &names)?,
    };

    let mut taps = Taps::active(&dev);
    let forward = net.forward(data.input(0), &mut taps).map(|out| {
        let (shape, flat) = flat_output(spec, out);
        (shape.clone(), loss(spec, &shape, flat, &data, 0))
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
    match guarded(|| Ok(loss.backward())) {
        Err(e) => inspection.backward_error = Some(message(&e)),
        Ok(grads) => {
            let grads = GradientsParams::from_grads(grads, &net.model);
            let got =
                parity_common::optim::Parameters::frame_grads(&net, &grads, spec.dtype, &|_| true)?;
            inspection.no_grad = net
                .params
                .iter()
                .filter(|p| !got.iter().any(|(n, _)| *n == p.name))
                .map(|p| p.name.clone())
                .collect();
        }
    }
    Ok(inspection)
}
