//! Reductions, sorting, indexing and losses mapped onto burn's API (the rest of
//! [`super::ops::apply`]).

use anyhow::anyhow;
use burn::nn::loss::{CrossEntropyLossConfig, MseLoss, Reduction as BurnReduction};
use burn::tensor::module::embedding;
use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor};
use parity_common::probe_spec::{Op, Reduction};

use super::args::{same_shape, Args};
use super::dyn_tensor::{dim, Dyn, DynInt, Value};
use super::outcome::{framework, unsupported, Fault, Step};

/// Applies a reduction, sorting, indexing or loss op (see [`super::ops::apply`]).
pub(crate) fn apply(op: &Op, x: &mut Args, dev: &Device) -> Step<Value> {
    Ok(match op {
        Op::Sum { dims, keepdim }
        | Op::Mean { dims, keepdim }
        | Op::Max { dims, keepdim }
        | Op::Min { dims, keepdim } => {
            reduction(op, x.float("input")?, dims.as_deref(), *keepdim)?.into()
        }
        Op::Argmax { dim: d, keepdim } | Op::Argmin { dim: d, keepdim } => {
            let a = x.float("input")?;
            let rank = a.rank();
            let d = dim(*d, rank)?;
            let max = matches!(op, Op::Argmax { .. });
            let squeeze = !keepdim && rank > 1;
            each_rank!(a, t => {
                let i = if max { t.argmax(d) } else { t.argmin(d) };
                if squeeze {
                    with_rank!(rank - 1, R => DynInt::from(i.squeeze_dim::<R>(d)))
                } else {
                    DynInt::from(i)
                }
            })
            .into()
        }
        Op::Sort { dim: d, descending } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            Value::from(each_rank!(a, t => Dyn::from(if *descending {
                t.sort_descending(d)
            } else {
                t.sort(d)
            })))
        }
        Op::Argsort { dim: d, descending } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            Value::from(each_rank!(a, t => DynInt::from(if *descending {
                t.argsort_descending(d)
            } else {
                t.argsort(d)
            })))
        }
        Op::Embedding => {
            let indices = x
                .int("indices")?
                .to::<Tensor<2, Int>>("module::embedding", "indices tensor")?;
            let weight = x.ranked::<2>("weight")?;
            Dyn::from(embedding(weight, indices)).into()
        }
        Op::IndexSelect { dim: d } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            let index = x.int("index")?.to::<Tensor<1, Int>>("select", "index")?;
            Value::from(each_rank!(a, t => Dyn::from(t.select(d, index))))
        }
        Op::Gather { dim: d } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            let index = x.int("index")?;
            Value::from(each_rank!(a, t => Dyn::from(t.gather(d, index.to("gather", "index")?))))
        }
        Op::ScatterAdd { dim: d } | Op::Scatter { dim: d } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            let (index, src) = (x.int("index")?, x.float("src")?);
            let update = match op {
                Op::ScatterAdd { .. } => IndexingUpdateOp::Add,
                _ => IndexingUpdateOp::Assign,
            };
            Value::from(each_rank!(a, t => {
                let u = src.like(&t, "scatter", "src")?;
                Dyn::from(t.scatter(d, index.to("scatter", "index")?, u, update))
            }))
        }
        Op::IndexAdd { .. } | Op::IndexPut { .. } => {
            let a = x.float("input")?;
            let (d, update) = match op {
                Op::IndexAdd { dim: d } => (dim(*d, a.rank())?, IndexingUpdateOp::Add),
                Op::IndexPut { accumulate: true } => (0, IndexingUpdateOp::Add),
                _ => (0, IndexingUpdateOp::Assign),
            };
            let index = x
                .int("index")?
                .to::<Tensor<1, Int>>("select_assign", "index")?;
            let src = x.float("src")?;
            Value::from(each_rank!(a, t => {
                let u = src.like(&t, "select_assign", "src")?;
                Dyn::from(t.select_assign(d, index, u, update))
            }))
        }
        Op::CrossEntropy { reduction } => {
            if *reduction != Reduction::Mean {
                return Err(unsupported(format!(
                    "cross_entropy reduction {}: burn's nn::loss::CrossEntropyLoss::forward \
                     only takes the mean over the samples (no reduction argument)",
                    reduction_name(*reduction)
                )));
            }
            let logits = x.ranked::<2>("logits")?;
            let targets = x
                .int("targets")?
                .to::<Tensor<1, Int>>("CrossEntropyLoss", "targets tensor")?;
            let loss = CrossEntropyLossConfig::new()
                .with_logits(true)
                .with_pad_tokens(None)
                .with_weights(None)
                .with_smoothing(None)
                .init(dev);
            Dyn::from(loss.forward(logits, targets)).into()
        }
        Op::Nll { .. } => {
            return Err(unsupported(
                "nll: burn 0.22.1 has no negative log-likelihood loss over log-probabilities \
                 (nn::loss::CrossEntropyLoss takes logits, or probabilities it takes the log of)",
            ))
        }
        Op::Mse { reduction } => {
            let (a, b) = (x.float("input")?, x.float("target")?);
            same_shape("mse", &a, &b)?;
            let mse = MseLoss::new();
            Value::from(each_rank!(a, t => {
                let u = b.like(&t, "mse", "target")?;
                match reduction {
                    Reduction::Mean => Dyn::from(mse.forward(t, u, BurnReduction::Mean)),
                    Reduction::Sum => Dyn::from(mse.forward(t, u, BurnReduction::Sum)),
                    Reduction::None => Dyn::from(mse.forward_no_reduction(t, u)),
                }
            }))
        }
        other => return Err(Fault::Spec(anyhow!("{other:?} is not a reduction op"))),
    })
}

fn reduction_name(r: Reduction) -> &'static str {
    match r {
        Reduction::Mean => "mean",
        Reduction::Sum => "sum",
        Reduction::None => "none",
    }
}

/// The reduced dimensions as indices in order, every one for `None` or an empty list (as
/// PyTorch reads `dim=[]`); a dimension given twice is refused, as PyTorch refuses it.
fn reduced_dims(dims: Option<&[i64]>, rank: usize) -> Step<Vec<usize>> {
    let Some(dims) = dims.filter(|d| !d.is_empty()) else {
        return Ok((0..rank).collect());
    };
    let mut out = Vec::new();
    for &d in dims {
        let i = dim(d, rank)?;
        if out.contains(&i) {
            return Err(framework(format!(
                "dimension {d} appears twice in the reduced dimensions {dims:?}"
            )));
        }
        out.push(i);
    }
    Ok(out)
}

/// `sum`, `mean`, `max` (amax) or `min` (amin) over `dims`: burn's `sum`/`mean`/`max`/`min`
/// (a `[1]` tensor) when every dimension goes and `keepdim` is false, otherwise
/// `sum_dims`/`mean_dims`/`max_dims`/`min_dims` (reduced dimensions kept with size 1),
/// followed by `squeeze_dims` of the reduced dimensions when `keepdim` is false (the
/// composition burn's own `sum_dims_squeeze` is).
fn reduction(op: &Op, a: Dyn, dims: Option<&[i64]>, keepdim: bool) -> Step<Dyn> {
    let rank = a.rank();
    let idx = reduced_dims(dims, rank)?;
    let all = idx.len() == rank && !keepdim;
    let left = rank - idx.len();
    macro_rules! go {
        ($full:ident, $some:ident) => {
            each_rank!(a, t => if all {
                Dyn::from(t.$full())
            } else {
                let r = t.$some(&idx);
                if keepdim {
                    Dyn::from(r)
                } else {
                    with_rank!(left, R => Dyn::from(r.squeeze_dims::<R>(&idx)))
                }
            })
        };
    }
    Ok(match op {
        Op::Sum { .. } => go!(sum, sum_dims),
        Op::Mean { .. } => go!(mean, mean_dims),
        Op::Max { .. } => go!(max, max_dims),
        Op::Min { .. } => go!(min, min_dims),
        other => return Err(Fault::Spec(anyhow!("{other:?} is not a reduction"))),
    })
}
