//! The device axis: the workflow's names mapped to candle devices, and tensor export.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use parity_common::frames::RawTensor;
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

/// Copies `t` to the host, flattened to one dimension in its logical (row-major) order,
/// keeping its dtype.
///
/// # Errors
/// For dtypes other than F32 and F64, or when the device copy fails.
pub fn to_raw(t: &Tensor) -> Result<RawTensor> {
    let flat = t.flatten_all()?;
    Ok(match flat.dtype() {
        DType::F32 => RawTensor::from_f32(&flat.to_vec1::<f32>()?),
        DType::F64 => RawTensor::from_f64(&flat.to_vec1::<f64>()?),
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
