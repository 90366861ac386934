//! The targets of a run per batch, and the losses.

use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction};
use burn::tensor::{Device, Int, Tensor};
use parity_common::spec::Loss;

/// The targets of a run, one tensor per batch.
pub(crate) enum Targets {
    /// MSE targets `[batch, outputs]`.
    Values(Vec<Tensor<2>>),
    /// Class labels `[batch]` (`[batch·T]`, the next tokens flattened row-major, for token
    /// targets).
    Classes(Vec<Tensor<1, Int>>),
}

/// Splits `[batches, rest…]` host values into one slice per batch.
pub(crate) fn per_batch<T>(values: &[T], batches: usize) -> impl Iterator<Item = &[T]> {
    values.chunks_exact(values.len() / batches.max(1))
}

/// The loss of `out` against batch `i` of `targets` (`crate::net::loss`): MSE of `[batch, outputs]` values (mean over every element),
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
