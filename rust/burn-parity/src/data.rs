//! The training data per batch, the MLP's and CNN's targets as the fixture holds them, and
//! the losses.

use anyhow::{bail, Context, Result};
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::tensor::{Device, Int, Tensor, TensorData};
use parity_common::spec::{FloatType, Loss};

use crate::device::float_tensor;
use crate::fixture::Fixture;

/// The training data, one tensor per batch: inputs `[batch, …input]` in the run dtype (token
/// ids `[batch, seq_len]` int for the transformer) and targets `[batch, outputs]` in the run
/// dtype (MSE) or `[batch]` int (cross-entropy; `[batch·seq_len]`, the next tokens flattened
/// row-major, for the transformer).
pub struct Data {
    pub(crate) inputs: Inputs,
    pub(crate) targets: Targets,
    pub(crate) device: Device,
}

pub(crate) enum Inputs {
    /// MLP inputs `[batch, sizes[0]]`.
    Flat(Vec<Tensor<2>>),
    /// CNN inputs `[batch, in_channels, length]`.
    Signal(Vec<Tensor<3>>),
    /// Transformer token ids `[batch, seq_len]`.
    Tokens(Vec<Tensor<2, Int>>),
}

pub(crate) enum Targets {
    /// MSE targets `[batch, outputs]`.
    Values(Vec<Tensor<2>>),
    /// Class labels `[batch]` (`[batch·seq_len]` for the transformer).
    Classes(Vec<Tensor<1, Int>>),
}

impl Data {
    /// Number of batches; step `t` (from 1) uses batch `(t − 1) mod batches`.
    pub fn batches(&self) -> usize {
        match &self.inputs {
            Inputs::Flat(v) => v.len(),
            Inputs::Signal(v) => v.len(),
            Inputs::Tokens(v) => v.len(),
        }
    }

    /// The device the data (and the net loaded with it) lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn index(&self, t: u32) -> usize {
        (t as usize - 1) % self.batches()
    }
}

/// Splits `[batches, rest…]` host values into one slice per batch.
pub(crate) fn per_batch<T>(values: &[T], batches: usize) -> impl Iterator<Item = &[T]> {
    values.chunks_exact(values.len() / batches.max(1))
}

/// The targets of the MLP and CNN from the fixture, one tensor per batch, for
/// `(batches, batch, outputs)`: `y` float32 `[batches, batch, outputs]` in the run dtype `ty`
/// (MSE) or int64 labels `[batches, batch]` (cross-entropy), on `device`.
///
/// # Errors
/// When the fixture lacks `y` or holds it with another shape or dtype.
pub(crate) fn float_targets(
    fx: &Fixture,
    loss: Loss,
    (batches, batch, outputs): (usize, usize, usize),
    ty: FloatType,
    device: &Device,
) -> Result<Targets> {
    Ok(match loss {
        Loss::Mse => {
            let y = fx.f32("y", &[batches, batch, outputs])?;
            Targets::Values(
                per_batch(y, batches)
                    .map(|b| float_tensor(b, [batch, outputs], ty, device))
                    .collect(),
            )
        }
        Loss::CrossEntropy => {
            let (shape, y) = fx.i64s.get("y").with_context(|| {
                format!(
                    "fixture {}: cross-entropy needs int64 labels \"y\"",
                    fx.path
                )
            })?;
            if shape != &[batches, batch] {
                bail!(
                    "fixture {}: y is I64 {shape:?}, expected [{batches}, {batch}]",
                    fx.path
                );
            }
            Targets::Classes(
                per_batch(y, batches)
                    .map(|b| {
                        Tensor::<1, Int>::from_data(TensorData::new(b.to_vec(), [batch]), device)
                    })
                    .collect(),
            )
        }
    })
}

/// The batch-mean loss of step `t`'s output (see [`Loss`]): burn's `MseLoss` with
/// `Reduction::Mean`, or `CrossEntropyLoss` on logits (log-softmax, mean over samples). For
/// the transformer `out` is the logits `[batch·seq_len, vocab]` and every position is a
/// sample, so the mean is over batch × seq_len. Returns a one-element tensor.
pub fn loss(kind: Loss, out: Tensor<2>, data: &Data, t: u32, device: &Device) -> Tensor<1> {
    batch_loss(kind, out, &data.targets, data.index(t), device)
}

/// The loss of `out` against batch `i` of `targets` ([`loss`], which the built-in runs and
/// an own model's runner share): MSE of `[batch, outputs]` values (mean over every element),
/// or the cross-entropy of logits `[samples, classes]` against `[samples]` labels (mean over
/// samples).
///
/// # Panics
/// When the loss kind does not fit the targets (the loaders pair them) or burn refuses the
/// shapes.
pub(crate) fn batch_loss(
    kind: Loss,
    out: Tensor<2>,
    targets: &Targets,
    i: usize,
    device: &Device,
) -> Tensor<1> {
    match (kind, targets) {
        (Loss::Mse, Targets::Values(y)) => {
            MseLoss::new().forward(out, y[i].clone(), Reduction::Mean)
        }
        (Loss::CrossEntropy, Targets::Classes(y)) => CrossEntropyLossConfig::new()
            .with_logits(true)
            .init(device)
            .forward(out, y[i].clone()),
        _ => unreachable!("the loaders pair each loss with its targets"),
    }
}
