//! The device axis: the workflow's names mapped to candle devices, tensor export, and the
//! import of a replay's state tensors.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use parity_common::frames::RawTensor;
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
