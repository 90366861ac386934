//! The fixture of a run, read once ([`Fixture`]): every tensor by name (the parameters and
//! buffers the port's `VarBuilder` serves, [`parity_common::candle::FixtureStore`]) and the
//! batches of its data ([`Data`]), as the run spec's model says they are
//! ([`InputKind`], [`TargetKind`]).

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use parity_common::spec::{InputKind, RunSpec, TargetKind};

use crate::device;

/// The fixture of a run: its tensors and its data.
pub struct Fixture {
    /// Every tensor of the fixture, by name, as stored on the CPU (float32 parameters and
    /// buffers, the data).
    pub tensors: HashMap<String, Tensor>,
    /// The batches, on the run device.
    pub data: Data,
}

/// The training data of a run, on the run device.
pub struct Data {
    /// Inputs `[batches, B, …]`: token ids as `DType::U32` ([`InputKind::Tokens`], stored
    /// int64 `[batches, B, T]`) or floats in the run dtype.
    pub x: Tensor,
    /// Targets `[batches, B, …]`: int64 next tokens `[batches, B, T]` or class labels
    /// `[batches, B]`, or floats in the run dtype.
    pub y: Tensor,
}

impl Data {
    /// Number of batches; step `t` (from 1) uses batch `(t − 1) mod batches`.
    pub fn batches(&self) -> usize {
        self.x.dims()[0]
    }

    /// Step `t`'s batch (t ≥ 1): batch `(t − 1) mod batches`, `(x, y)` without the leading
    /// dimension.
    ///
    /// # Errors
    /// Only on internal indexing failures.
    pub fn batch(&self, t: u32) -> Result<(Tensor, Tensor)> {
        self.micro_batch(t, 0, 1)
    }

    /// Micro-batch `j` of `k` of step `t` (t ≥ 1): batch `((t − 1)·k + j) mod batches`.
    ///
    /// # Errors
    /// Only on internal indexing failures.
    pub fn micro_batch(&self, t: u32, j: u32, k: u32) -> Result<(Tensor, Tensor)> {
        let i = ((t as usize - 1) * k as usize + j as usize) % self.batches();
        Ok((self.x.get(i)?, self.y.get(i)?))
    }
}

impl Fixture {
    /// Reads the fixture of `spec` and its data in the run dtype on `dev`: `x` int64 token
    /// ids `[batches, B, T]`, every id in `0..2³²` (converted to U32), or float32
    /// `[batches, B, …]`; `y` int64 `[batches, B, T]` of `x`'s shape (next tokens), int64
    /// `[batches, B]` (class labels) or float32 `[batches, B, …]`.
    ///
    /// # Errors
    /// An unreadable fixture, or data other than the above (the message names the fixture
    /// and the tensor).
    pub fn read(spec: &RunSpec, dev: &Device) -> Result<Self> {
        let path = spec.fixture.display();
        let tensors = candle_core::safetensors::load(&spec.fixture, &Device::Cpu)
            .with_context(|| format!("reading fixture {path}"))?;
        let get = |name: &str, dtype: DType, rank: Option<usize>| -> Result<Tensor> {
            let t = tensors
                .get(name)
                .with_context(|| format!("fixture {path} has no tensor {name:?}"))?;
            if t.dtype() != dtype || rank.is_some_and(|r| t.rank() != r) || t.rank() < 2 {
                bail!(
                    "fixture {path}: {name} is {:?} {:?}; expected {dtype:?} [batches, batch{}]",
                    t.dtype(),
                    t.dims(),
                    match rank {
                        Some(3) => ", T",
                        Some(_) => "",
                        None => ", …",
                    }
                );
            }
            Ok(t.clone())
        };
        let dt = device::dtype(spec.dtype);
        let x = match spec.model.input {
            InputKind::Tokens => {
                let x = get("x", DType::I64, Some(3))?;
                let ids = x.flatten_all()?.to_vec1::<i64>()?;
                if let Some(bad) = ids.iter().find(|&&i| i < 0 || i > i64::from(u32::MAX)) {
                    bail!("fixture {path}: x holds token id {bad}, which is no U32");
                }
                x.to_dtype(DType::U32)?
            }
            InputKind::Float => get("x", DType::F32, None)?.to_dtype(dt)?,
        };
        let target = spec.model.target;
        let y = match target {
            TargetKind::Tokens => get("y", DType::I64, Some(3))?,
            TargetKind::Classes => get("y", DType::I64, Some(2))?,
            TargetKind::Float => get("y", DType::F32, None)?.to_dtype(dt)?,
        };
        let (xd, yd) = (x.dims(), y.dims());
        let same = match target {
            TargetKind::Tokens => xd == yd,
            _ => xd[..2] == yd[..2],
        };
        if !same {
            bail!("fixture {path}: x is {xd:?} and y {yd:?}; they must agree in [batches, batch] (next tokens: in every dimension)");
        }
        let data = Data {
            x: x.to_device(dev)?,
            y: y.to_device(dev)?,
        };
        Ok(Self { tensors, data })
    }
}
