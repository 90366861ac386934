//! The device axis: the workflow's names mapped to candle devices, tensor export, and the
//! import of a replay's state tensors.

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use parity_common::frames::RawTensor;
use parity_common::probe_spec::ProbeDtype;
use parity_common::replay::StateTensor;
use parity_common::spec::{DeviceKind, FloatType};

/// Opens `kind` (ordinal 0 for GPUs).
///
/// # Errors
/// When the binary was built without the matching cargo feature (`cuda`, `metal`) or the
/// device cannot be opened; the message names the feature to build with.
pub fn open(kind: DeviceKind) -> Result<Device> {
    match kind {
        DeviceKind::Cpu => Ok(Device::Cpu),
        DeviceKind::Cuda => Device::new_cuda(0)
            .context("opening CUDA device 0 (the binary must be built with the `cuda` feature)"),
        DeviceKind::Metal => Device::new_metal(0)
            .context("opening Metal device 0 (the binary must be built with the `metal` feature)"),
    }
}

/// The candle dtype of a run dtype.
pub fn dtype(t: FloatType) -> DType {
    match t {
        FloatType::F32 => DType::F32,
        FloatType::F64 => DType::F64,
    }
}

/// The candle dtype of a probe run dtype (`F16`, `BF16`, `F32`, `F64`).
pub fn probe_dtype(t: ProbeDtype) -> DType {
    match t {
        ProbeDtype::F16 => DType::F16,
        ProbeDtype::Bf16 => DType::BF16,
        ProbeDtype::F32 => DType::F32,
        ProbeDtype::F64 => DType::F64,
    }
}

/// Copies `t` to the host, flattened to one dimension in its logical (row-major) order:
/// F32 and F64 as they are, F16 and BF16 widened to float32, integer dtypes (U8, U32, I16,
/// I32, I64: candle's indices) as float64; every widening is exact (|i| < 2⁵³ for I64).
///
/// # Errors
/// For other dtypes (the 8-bit and 4-bit floats), or when the device copy fails.
pub fn to_raw(t: &Tensor) -> Result<RawTensor> {
    let flat = t.flatten_all()?;
    Ok(match flat.dtype() {
        DType::F32 => RawTensor::from_f32(&flat.to_vec1::<f32>()?),
        DType::F64 => RawTensor::from_f64(&flat.to_vec1::<f64>()?),
        DType::F16 | DType::BF16 => {
            RawTensor::from_f32(&flat.to_dtype(DType::F32)?.to_vec1::<f32>()?)
        }
        DType::U8 | DType::U32 | DType::I16 | DType::I32 | DType::I64 => {
            RawTensor::from_f64(&flat.to_dtype(DType::F64)?.to_vec1::<f64>()?)
        }
        other => bail!("cannot export a tensor of dtype {other:?}"),
    })
}

/// Reads a scalar (any shape with one element) as f64.
///
/// # Errors
/// When `t` does not hold exactly one element.
pub fn scalar_f64(t: &Tensor) -> Result<f64> {
    let flat = t.flatten_all()?.to_dtype(DType::F64)?;
    let v = flat.to_vec1::<f64>()?;
    if v.len() != 1 {
        bail!("expected one element, got {}", v.len());
    }
    Ok(v[0])
}

/// A replay state tensor ([`StateTensor`], f64 values) as a tensor of its shape in `dtype`
/// (F32: the values rounded to float32, exact for the float32 state the workflow writes;
/// F64: the values as they are) on `dev`.
///
/// # Errors
/// For dtypes other than F32 and F64, a shape that does not match the number of values,
/// or a failing device copy.
pub fn state_tensor(t: &StateTensor, dtype: DType, dev: &Device) -> Result<Tensor> {
    let shape = t.shape.as_slice();
    Ok(match dtype {
        DType::F32 => Tensor::from_vec(t.to_f32(), shape, dev)?,
        DType::F64 => Tensor::from_vec(t.values.clone(), shape, dev)?,
        other => bail!("cannot import a state tensor as {other:?}"),
    })
}

/// Host copies ([`to_raw`]) of the `Var`s `keep` selects, named and in the order of `params`
/// (a model's parameters by state_dict key): what a frame records of them.
///
/// # Errors
/// When a device copy fails.
pub fn frame_vars(
    params: &[(String, Var)],
    keep: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, RawTensor)>> {
    params
        .iter()
        .filter(|(name, _)| keep(name))
        .map(|(name, var)| Ok((name.clone(), to_raw(var.as_tensor())?)))
        .collect()
}

/// Host copies ([`to_raw`]) of the gradients in `grads` of the `Var`s `keep` selects, named
/// and ordered as [`frame_vars`]; a `Var` without a gradient (cut off from the loss by a
/// fused op without backward) is left out.
///
/// # Errors
/// When a device copy fails.
pub fn frame_var_grads(
    params: &[(String, Var)],
    grads: &GradStore,
    keep: &dyn Fn(&str) -> bool,
) -> Result<Vec<(String, RawTensor)>> {
    let mut out = Vec::new();
    for (name, var) in params {
        if !keep(name) {
            continue;
        }
        if let Some(g) = grads.get(var) {
            out.push((name.clone(), to_raw(g)?));
        }
    }
    Ok(out)
}
