//! Adam's and AdamW's moments in and out of burn's own optimizer state, through burn's public
//! record API.
//!
//! burn-optim 0.22.1's `ModuleOptimizer` keeps one state per parameter, keyed by the
//! parameter's `ParamId`; for `Adam` and `AdamW` it is `AdamState`/`AdamWState { momentum:
//! AdaptiveMomentumState { time, moment_1, moment_2, max_moment_2 } }`. Its only public view
//! is the `OptimizerRecord` (`ModuleOptimizer::to_record` / `load_record`), whose fields are
//! private but which converts to and from a burnpack buffer (`into_bytes` / `from_bytes`).
//! The buffer is burn's `burn_pack` format (re-exported as `burn::store::burn_pack` with burn's
//! `store` feature): per parameter id `P`, tensors `P.momentum.moment_1` and
//! `P.momentum.moment_2` (carrying `param_id` P) and scalars `P.momentum.time` and `P.__rank`
//! (the names burn's `#[derive(RecordState)]` and `ModuleOptimizer::to_record` give them).
//!
//! [`read`] decodes `to_record()`'s buffer; [`load`] writes such a buffer with
//! `burn_pack::Writer`, hands it to `OptimizerRecord::from_bytes` and `load_record`, and reads
//! the state back to check that burn took every value (`load_record` silently skips a
//! parameter whose state it cannot rebuild).

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context, Result};
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::store::burn_pack::{self, Reader, Scalar, Writer};
use burn::tensor::TensorData;
use parity_common::replay::{Moments, StateTensor};
use parity_common::spec::FloatType;

use crate::device::{dtype, Host};
use crate::load::ParamInfo;

/// The Adam/AdamW state of one parameter, read from burn's optimizer.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamMoments {
    /// PyTorch state_dict name of the parameter.
    pub name: String,
    /// `moment_1` (PyTorch's `exp_avg`), flattened in PyTorch layout, run dtype.
    pub exp_avg: Host,
    /// `moment_2` (PyTorch's `exp_avg_sq`), same layout.
    pub exp_avg_sq: Host,
    /// burn's step counter `time` (the steps this state has taken).
    pub time: usize,
}

type Scalars = std::collections::BTreeMap<String, Scalar>;

fn key(info: &ParamInfo, leaf: &str) -> String {
    format!("{}.momentum.{leaf}", info.id.val())
}

/// Little-endian bytes of a burnpack tensor as host values, checked to be in `ty`.
fn host(t: &burn_pack::Tensor, ty: FloatType) -> Result<Host> {
    if t.dtype != dtype(ty) {
        bail!("{} is {:?} in a {} run", t.name, t.dtype, ty.name());
    }
    let bytes = t
        .to_bytes()
        .map_err(|e| anyhow!("reading {}: {e:?}", t.name))?;
    Ok(match ty {
        FloatType::F32 => Host::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        ),
        FloatType::F64 => Host::F64(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
    })
}

/// burn's optimizer record decoded: its tensors by name, and its scalars.
fn record(optim: &ModuleOptimizer) -> Result<(HashMap<String, burn_pack::Tensor>, Scalars)> {
    let bytes = optim
        .to_record()
        .into_bytes()
        .map_err(|e| anyhow!("encoding burn's optimizer record: {e:?}"))?;
    let reader = Reader::from_bytes(bytes)
        .map_err(|e| anyhow!("decoding burn's optimizer record: {e:?}"))?;
    let scalars = reader.scalars().clone();
    let tensors = reader
        .into_tensors()
        .map_err(|e| anyhow!("decoding burn's optimizer record: {e:?}"))?
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    Ok((tensors, scalars))
}

/// The moments of every parameter of `params` (state_dict order) held by `optim`, an Adam or
/// AdamW `ModuleOptimizer`, in PyTorch layout and the run dtype `ty`.
///
/// # Errors
/// When burn's record cannot be encoded or decoded, a parameter has no state (before its
/// first step, or SGD), or a moment is not in `ty`.
pub fn read(
    optim: &ModuleOptimizer,
    params: &[ParamInfo],
    ty: FloatType,
) -> Result<Vec<ParamMoments>> {
    let (tensors, scalars) = record(optim)?;
    params
        .iter()
        .map(|p| {
            let tensor = |leaf: &str| -> Result<Host> {
                let t = tensors.get(&key(p, leaf)).with_context(|| {
                    format!("burn's optimizer holds no {leaf} for {} yet", p.name)
                })?;
                Ok(p.to_torch(host(t, ty)?))
            };
            let time = scalars
                .get(&key(p, "time"))
                .copied()
                .and_then(|s| usize::try_from(s).ok())
                .with_context(|| format!("burn's optimizer holds no step count for {}", p.name))?;
            Ok(ParamMoments {
                name: p.name.clone(),
                exp_avg: tensor("moment_1")?,
                exp_avg_sq: tensor("moment_2")?,
                time,
            })
        })
        .collect()
}

/// The momentum buffer burn's SGD holds for `p` (`SgdState { momentum: MomentumState {
/// velocity } }`, record tensor `P.momentum.velocity`: PyTorch's `momentum_buffer`), in
/// PyTorch layout and the run dtype `ty`.
///
/// # Errors
/// When burn's record cannot be read, or holds no velocity for `p` (SGD without momentum,
/// before the parameter's first step, or another optimizer).
pub fn read_velocity(optim: &ModuleOptimizer, p: &ParamInfo, ty: FloatType) -> Result<Host> {
    let (tensors, _) = record(optim)?;
    let t = tensors
        .get(&key(p, "velocity"))
        .with_context(|| format!("burn's optimizer holds no momentum velocity for {}", p.name))?;
    Ok(p.to_torch(host(t, ty)?))
}

/// Values of a state tensor in burn's layout for `p`, rounded to `ty` (exact for float32
/// values), as burn's `TensorData` and as host values in PyTorch layout.
fn state_data(p: &ParamInfo, t: &StateTensor, ty: FloatType) -> (TensorData, Host) {
    let shape = p.burn_shape.clone();
    match ty {
        FloatType::F32 => {
            let v = t.to_f32();
            (TensorData::new(p.to_burn(&v), shape), Host::F32(v))
        }
        FloatType::F64 => (
            TensorData::new(p.to_burn(&t.values), shape),
            Host::F64(t.values.clone()),
        ),
    }
}

/// `optim` (an Adam or AdamW `ModuleOptimizer`) with its state replaced by `moments`:
/// `moment_1` = `exp_avg`, `moment_2` = `exp_avg_sq` (PyTorch layout in `moments`, burn's in
/// the record), `time` = `steps_taken`, for the parameters `params` (the net's, state_dict
/// order, the order of `moments`). The next `step` is then burn's step `steps_taken + 1`.
///
/// # Errors
/// When the counts do not match, burn's record cannot be built, or reading the state back
/// does not give exactly the values and step count written (burn dropped or changed them).
pub fn load(
    optim: ModuleOptimizer,
    params: &[ParamInfo],
    moments: &Moments,
    ty: FloatType,
) -> Result<ModuleOptimizer> {
    if moments.exp_avg.len() != params.len() || moments.exp_avg_sq.len() != params.len() {
        bail!(
            "{} parameters but {} exp_avg and {} exp_avg_sq",
            params.len(),
            moments.exp_avg.len(),
            moments.exp_avg_sq.len()
        );
    }
    let time = moments.steps_taken as usize;
    let mut tensors = Vec::new();
    let mut expected = Vec::new();
    let mut writer_scalars = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let (m, m_host) = state_data(p, &moments.exp_avg[i], ty);
        let (v, v_host) = state_data(p, &moments.exp_avg_sq[i], ty);
        for (leaf, data) in [("moment_1", m), ("moment_2", v)] {
            let (bytes, shape, dt) = data.into_parts();
            tensors.push(burn_pack::Tensor::new(
                key(p, leaf),
                dt,
                shape,
                Some(p.id.val()),
                bytes,
            ));
        }
        writer_scalars.push((key(p, "time"), Scalar::from(time)));
        writer_scalars.push((
            format!("{}.__rank", p.id.val()),
            Scalar::from(p.burn_shape.len()),
        ));
        expected.push(ParamMoments {
            name: p.name.clone(),
            exp_avg: m_host,
            exp_avg_sq: v_host,
            time,
        });
    }
    let mut writer = Writer::new(tensors);
    for (k, s) in &writer_scalars {
        writer = writer.with_scalar(k, *s);
    }
    let bytes = writer
        .into_bytes()
        .map_err(|e| anyhow!("writing the moments as a burnpack record: {e:?}"))?;
    let record = OptimizerRecord::from_bytes(bytes)
        .map_err(|e| anyhow!("burn refused the moments' record: {e:?}"))?;
    let optim = optim.load_record(record);
    let got = read(&optim, params, ty).context("reading the loaded moments back")?;
    if got != expected {
        bail!("burn's load_record did not keep the given moments and step count exactly");
    }
    Ok(optim)
}
