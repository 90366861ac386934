//! The device axis for burn: the CPU backend this binary was built with (`ndarray` or
//! `flex`, [`crate::BURN_BACKEND`]) with autodiff, on the CPU only, with the run's float type
//! as the device's default; and host transfers in and out.

use anyhow::{anyhow, bail, Result};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use parity_common::frames::RawTensor;
use parity_common::spec::{DeviceKind, FloatType};

/// The backend's device, before autodiff: ndarray's where the `ndarray` feature is on (also
/// beside `flex`: what `crate::BURN_BACKEND` reports), else Flex's.
fn backend_device() -> Device {
    #[cfg(feature = "ndarray")]
    {
        // burn 0.22 deprecates ndarray in favour of its Flex backend; the study measured ndarray.
        #[allow(deprecated)]
        Device::ndarray()
    }
    #[cfg(not(feature = "ndarray"))]
    {
        Device::flex()
    }
}

/// Opens burn's CPU device ([`crate::BURN_BACKEND`]) with autodiff, its default float type
/// set to `ty`.
///
/// The default matters beyond the tensors created here: burn creates some tensors itself
/// (optimizer state, loss internals) in the device's default float type, so a float64 run
/// must not leave it at float32. Checked after configuring.
///
/// # Errors
/// For `cuda` and `metal` (burn-parity is built with a CPU backend only; the workflow's
/// validity matrix never schedules them), or when the device refuses the float type: burn
/// takes a device's settings once per process, so one process cannot open both float types.
pub fn open(kind: DeviceKind, ty: FloatType) -> Result<Device> {
    let backend = crate::BURN_BACKEND;
    if kind != DeviceKind::Cpu {
        bail!(
            "burn-parity runs burn's {backend} backend, which it builds for the CPU only; \
             device {} is not supported",
            kind.name()
        );
    }
    let mut device = backend_device();
    // The settings are taken once per process; a second open with the same type is fine.
    if let Err(e) = device.configure(float_dtype(ty)) {
        let got = device.settings().float_dtype;
        if got != float_dtype(ty) {
            bail!(
                "the {backend} device's float type is already {got:?} in this process, cannot set {}: {e:?}",
                ty.name()
            );
        }
    }
    let device = device.autodiff();
    let got = device.settings().float_dtype;
    if got != float_dtype(ty) {
        bail!(
            "the autodiff device's default float type is {got:?}, expected {:?}",
            float_dtype(ty)
        );
    }
    Ok(device)
}

/// burn's float type of a run dtype.
pub fn float_dtype(ty: FloatType) -> FloatDType {
    match ty {
        FloatType::F32 => FloatDType::F32,
        FloatType::F64 => FloatDType::F64,
    }
}

/// burn's tensor dtype of a run dtype.
pub fn dtype(ty: FloatType) -> DType {
    match ty {
        FloatType::F32 => DType::F32,
        FloatType::F64 => DType::F64,
    }
}

/// A float tensor of `shape` from float32 host values (row-major), in the run dtype: float32
/// as is, float64 widened exactly (the fixture's float32 values, never a fresh draw).
///
/// # Panics
/// When `values.len()` is not the product of `shape` (burn's own check).
pub fn float_tensor<const D: usize>(
    values: &[f32],
    shape: [usize; D],
    ty: FloatType,
    device: &Device,
) -> Tensor<D> {
    let data = match ty {
        FloatType::F32 => TensorData::new(values.to_vec(), shape),
        FloatType::F64 => TensorData::new(
            values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
            shape,
        ),
    };
    Tensor::from_data(data, (device, dtype(ty)))
}

/// A float tensor of `shape` from float64 host values (row-major), rounded once to the run
/// dtype (to nearest, as PyTorch's `.to(float32)`): a probe's inputs.
///
/// # Panics
/// When `values.len()` is not the product of `shape` (burn's own check).
pub fn float_tensor_from_f64<const D: usize>(
    values: &[f64],
    shape: [usize; D],
    ty: FloatType,
    device: &Device,
) -> Tensor<D> {
    let data = match ty {
        FloatType::F32 => {
            TensorData::new(values.iter().map(|&v| v as f32).collect::<Vec<_>>(), shape)
        }
        FloatType::F64 => TensorData::new(values.to_vec(), shape),
    };
    Tensor::from_data(data, (device, dtype(ty)))
}

/// Host values of a float tensor, in the run's own type.
#[derive(Debug, Clone, PartialEq)]
pub enum Host {
    /// float32 values.
    F32(Vec<f32>),
    /// float64 values.
    F64(Vec<f64>),
}

impl Host {
    /// Reads `t` back (row-major, flattened) and checks that it is in the run dtype, so a
    /// float64 run can never silently hold float32 parameters.
    ///
    /// # Errors
    /// When the tensor cannot be read or its dtype is not `ty`'s.
    pub fn read<const D: usize>(t: Tensor<D>, ty: FloatType) -> Result<Host> {
        let data = t
            .try_into_data()
            .map_err(|e| anyhow!("reading a tensor back: {e:?}"))?;
        if data.dtype() != dtype(ty) {
            bail!(
                "a {} run produced a tensor of dtype {:?}",
                ty.name(),
                data.dtype()
            );
        }
        let err = |e| anyhow!("reading tensor data: {e:?}");
        Ok(match ty {
            FloatType::F32 => Host::F32(data.as_slice::<f32>().map_err(err)?.to_vec()),
            FloatType::F64 => Host::F64(data.as_slice::<f64>().map_err(err)?.to_vec()),
        })
    }

    /// Applies a layout change that only moves elements (see [`crate::layout`]).
    pub fn rearrange(
        self,
        f32s: impl Fn(&[f32]) -> Vec<f32>,
        f64s: impl Fn(&[f64]) -> Vec<f64>,
    ) -> Host {
        match self {
            Host::F32(v) => Host::F32(f32s(&v)),
            Host::F64(v) => Host::F64(f64s(&v)),
        }
    }

    /// The single value of a one-element tensor (a loss), widened to f64.
    ///
    /// # Errors
    /// When there is not exactly one element.
    pub fn scalar(&self) -> Result<f64> {
        match self {
            Host::F32(v) if v.len() == 1 => Ok(f64::from(v[0])),
            Host::F64(v) if v.len() == 1 => Ok(v[0]),
            _ => bail!("expected one element, got {}", self.len()),
        }
    }

    /// The values widened exactly to f64.
    pub fn widened(&self) -> Vec<f64> {
        match self {
            Host::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
            Host::F64(v) => v.clone(),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Host::F32(v) => v.len(),
            Host::F64(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A one-dimensional frame tensor in the same type.
    pub fn into_raw(self) -> RawTensor {
        match self {
            Host::F32(v) => RawTensor::from_f32(&v),
            Host::F64(v) => RawTensor::from_f64(&v),
        }
    }
}
