//! One probe op mapped onto candle's own API ([`apply`]); see the table in [`super`].

use anyhow::anyhow;
use candle_core::{Module, Tensor};
use parity_common::probe_spec::{dim_index, pool_size, GeluApproximate, Op, OpVariant, Reduction};

use super::outcome::{Fault, Step};

/// A signed dimension (negative counts from the end) as an index below `rank`.
pub(super) fn dim(d: i64, rank: usize) -> Step<usize> {
    dim_index(d, rank)
        .ok_or_else(|| Fault::Framework(format!("dimension {d} out of range for rank {rank}")))
}

/// The dimensions a reduction reduces (`None`: every one), as indices.
fn reduced(dims: &Option<Vec<i64>>, rank: usize) -> Step<Vec<usize>> {
    match dims {
        None => Ok((0..rank).collect()),
        Some(ds) => ds.iter().map(|d| dim(*d, rank)).collect(),
    }
}

/// The one value candle takes for both axes, or `unsupported` when the pair differs.
fn one_for_both(api: &str, arg: &str, pair: [usize; 2]) -> Step<usize> {
    if pair[0] == pair[1] {
        Ok(pair[0])
    } else {
        Err(Fault::Unsupported(format!(
            "{api} takes one {arg} for both axes, not {pair:?}"
        )))
    }
}

/// `unsupported` unless `padding` is zero: candle's pooling has no padding argument.
fn no_padding(api: &str, padding: [usize; 2]) -> Step<()> {
    if padding == [0, 0] {
        Ok(())
    } else {
        unsupported(&format!(
            "{api} has no padding argument (padding {padding:?})"
        ))
    }
}

/// `unsupported` when `ceil_mode` gives a 2-D pooling of `a` (no padding, no dilation)
/// another output size than floor mode: candle always rounds down, so where both agree
/// the computation is the same.
fn floor_mode(
    api: &str,
    a: &Tensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    ceil_mode: bool,
) -> Step<()> {
    if !ceil_mode || a.rank() != 4 {
        return Ok(());
    }
    for i in 0..2 {
        let size = a.dims()[2 + i];
        if pool_size(size, kernel[i], 0, stride[i], 1, true)
            != pool_size(size, kernel[i], 0, stride[i], 1, false)
        {
            return unsupported(&format!(
                "{api} rounds the output size down (no ceil_mode argument), and ceil_mode \
                 adds a window here"
            ));
        }
    }
    Ok(())
}

/// The optional third input (a bias), as candle_nn's layers take it.
fn bias(x: &[&Tensor]) -> Option<Tensor> {
    x.get(2).map(|b| (*b).clone())
}

fn unsupported<T>(why: &str) -> Step<T> {
    Err(Fault::Unsupported(why.to_string()))
}

/// The mean reduction candle's loss functions compute, or `unsupported`.
fn mean_only(api: &str, reduction: Reduction) -> Step<()> {
    match reduction {
        Reduction::Mean => Ok(()),
        Reduction::Sum => unsupported(&format!(
            "{api} returns the mean only (no reduction argument): reduction sum"
        )),
        Reduction::None => unsupported(&format!(
            "{api} returns the mean only (no reduction argument): reduction none"
        )),
    }
}

/// The sort dimension, which candle's sorts require to be the last one.
fn last_dim_only(api: &str, d: i64, rank: usize) -> Step<()> {
    if dim(d, rank)? + 1 == rank {
        Ok(())
    } else {
        unsupported(&format!(
            "{api} sorts along the last dimension only, not dimension {d} of rank {rank}"
        ))
    }
}

/// `amax`/`amin` over several dimensions: candle's `max_keepdim`/`min_keepdim` take one
/// dimension, so each is reduced in turn (keeping it), then the reduced dimensions are
/// dropped unless `keepdim`. One dimension without `keepdim` is candle's `max`/`min`.
fn extreme(a: &Tensor, dims: &[usize], keepdim: bool, max: bool) -> Step<Tensor> {
    if let ([d], false) = (dims, keepdim) {
        return Ok(if max { a.max(*d)? } else { a.min(*d)? });
    }
    let mut t = a.clone();
    for &d in dims {
        t = if max {
            t.max_keepdim(d)?
        } else {
            t.min_keepdim(d)?
        };
    }
    if !keepdim {
        let kept: Vec<usize> = (0..a.rank())
            .filter(|d| !dims.contains(d))
            .map(|d| a.dims()[d])
            .collect();
        t = t.reshape(kept)?;
    }
    Ok(t)
}

/// Applies one op to its inputs (their count is checked by
/// [`parity_common::probe_spec::ProbeSpec`]): candle's result, candle's error as
/// [`Fault::Framework`], or [`Fault::Unsupported`] for an op or argument candle's API lacks.
pub(super) fn apply(op: &Op, x: &[&Tensor]) -> Step<Tensor> {
    let a = x[0];
    let rank = a.rank();
    Ok(match op {
        Op::Transpose { dim0, dim1 } => a.transpose(dim(*dim0, rank)?, dim(*dim1, rank)?)?,
        Op::Narrow {
            dim: d,
            start,
            length,
        } => a.narrow(dim(*d, rank)?, *start, *length)?,
        Op::BroadcastTo { shape } => a.broadcast_as(shape.as_slice())?,
        Op::Unsqueeze { dim: d } => a.unsqueeze(dim(*d, rank + 1)?)?,
        Op::Squeeze { dim: d } => a.squeeze(dim(*d, rank)?)?,
        Op::Reshape { shape } => a.reshape(shape.as_slice())?,
        Op::Contiguous => a.contiguous()?,
        Op::Conv1d {
            padding,
            stride,
            dilation,
            groups,
        } => a.conv1d(x[1], *padding, *stride, *dilation, *groups)?,
        Op::Conv2d {
            padding,
            stride,
            dilation,
            groups,
        } => {
            let api = "Tensor::conv2d";
            a.conv2d(
                x[1],
                one_for_both(api, "padding", *padding)?,
                one_for_both(api, "stride", *stride)?,
                one_for_both(api, "dilation", *dilation)?,
                *groups,
            )?
        }
        Op::ConvTranspose1d {
            padding,
            output_padding,
            stride,
            dilation,
            groups,
        } => {
            let config = candle_nn::ConvTranspose1dConfig {
                padding: *padding,
                output_padding: *output_padding,
                stride: *stride,
                dilation: *dilation,
                groups: *groups,
            };
            candle_nn::ConvTranspose1d::new(x[1].clone(), bias(x), config).forward(a)?
        }
        Op::ConvTranspose2d {
            padding,
            output_padding,
            stride,
            dilation,
            groups,
        } => {
            let api = "Tensor::conv_transpose2d";
            if *groups != 1 {
                return unsupported(&format!("{api} has no groups argument (groups {groups})"));
            }
            let config = candle_nn::ConvTranspose2dConfig {
                padding: one_for_both(api, "padding", *padding)?,
                output_padding: one_for_both(api, "output_padding", *output_padding)?,
                stride: one_for_both(api, "stride", *stride)?,
                dilation: one_for_both(api, "dilation", *dilation)?,
            };
            candle_nn::ConvTranspose2d::new(x[1].clone(), bias(x), config).forward(a)?
        }
        Op::MaxPool1d { .. } => {
            return unsupported(
                "candle 0.11 has no 1-D max pooling (Tensor::max_pool2d_with_stride only)",
            )
        }
        Op::AvgPool1d { .. } => {
            return unsupported(
                "candle 0.11 has no 1-D average pooling (Tensor::avg_pool2d_with_stride only)",
            )
        }
        Op::MaxPool2d {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        } => {
            let api = "Tensor::max_pool2d_with_stride";
            no_padding(api, *padding)?;
            if *dilation != [1, 1] {
                return unsupported(&format!(
                    "{api} has no dilation argument (dilation {dilation:?})"
                ));
            }
            floor_mode(api, a, *kernel, *stride, *ceil_mode)?;
            a.max_pool2d_with_stride((kernel[0], kernel[1]), (stride[0], stride[1]))?
        }
        Op::AvgPool2d {
            kernel,
            stride,
            padding,
            ceil_mode,
            // Without padding (candle has none) the divisor is the kernel's size either way.
            count_include_pad: _,
        } => {
            let api = "Tensor::avg_pool2d_with_stride";
            no_padding(api, *padding)?;
            floor_mode(api, a, *kernel, *stride, *ceil_mode)?;
            a.avg_pool2d_with_stride((kernel[0], kernel[1]), (stride[0], stride[1]))?
        }
        Op::Pad { padding } => {
            let lead = rank.checked_sub(padding.len()).ok_or_else(|| {
                Fault::Framework(format!(
                    "pad: {} [before, after] pairs for rank {rank}",
                    padding.len()
                ))
            })?;
            let mut t = a.clone();
            for (i, [before, after]) in padding.iter().enumerate() {
                t = t.pad_with_zeros(lead + i, *before, *after)?;
            }
            t
        }
        Op::Linear => candle_nn::Linear::new(x[1].clone(), bias(x)).forward(a)?,
        Op::Matmul => a.matmul(x[1])?,
        Op::LayerNorm { eps, candle } => match candle {
            OpVariant::Fused => candle_nn::ops::layer_norm(a, x[1], x[2], *eps as f32)?,
            OpVariant::Slow => candle_nn::ops::layer_norm_slow(a, x[1], x[2], *eps as f32)?,
        },
        Op::RmsNorm { eps, candle } => match candle {
            OpVariant::Fused => candle_nn::ops::rms_norm(a, x[1], *eps as f32)?,
            OpVariant::Slow => candle_nn::ops::rms_norm_slow(a, x[1], *eps as f32)?,
        },
        Op::Softmax { dim: d, candle } => match candle {
            OpVariant::Fused => {
                if dim(*d, rank)? + 1 != rank {
                    return Err(Fault::Spec(anyhow!(
                        "the fused softmax works over the last dimension only"
                    )));
                }
                candle_nn::ops::softmax_last_dim(a)?
            }
            OpVariant::Slow => candle_nn::ops::softmax(a, dim(*d, rank)?)?,
        },
        Op::LogSoftmax { dim: d } => candle_nn::ops::log_softmax(a, dim(*d, rank)?)?,
        Op::UpsampleNearest1d { size } => a.upsample_nearest1d(*size)?,
        Op::UpsampleNearest2d { size } => a.upsample_nearest2d(size[0], size[1])?,
        Op::Relu => a.relu()?,
        Op::Abs => a.abs()?,
        Op::Sigmoid => candle_nn::ops::sigmoid(a)?,
        Op::Tanh => a.tanh()?,
        Op::Silu => a.silu()?,
        Op::Gelu { approximate } => match approximate {
            GeluApproximate::None => a.gelu_erf()?,
            GeluApproximate::Tanh => a.gelu()?,
        },
        Op::Elu { alpha } => a.elu(*alpha)?,
        Op::Exp => a.exp()?,
        Op::Log => a.log()?,
        Op::Sqrt => a.sqrt()?,
        Op::Add => a.add(x[1])?,
        Op::Sub => a.sub(x[1])?,
        Op::Mul => a.mul(x[1])?,
        Op::Div => a.div(x[1])?,
        Op::Maximum => a.maximum(x[1])?,
        Op::Minimum => a.minimum(x[1])?,
        Op::Sum { dims, keepdim } => {
            let ds = reduced(dims, rank)?;
            if *keepdim {
                a.sum_keepdim(ds)?
            } else {
                a.sum(ds)?
            }
        }
        Op::Mean { dims, keepdim } => {
            let ds = reduced(dims, rank)?;
            if *keepdim {
                a.mean_keepdim(ds)?
            } else {
                a.mean(ds)?
            }
        }
        Op::Max { dims, keepdim } => extreme(a, &reduced(dims, rank)?, *keepdim, true)?,
        Op::Min { dims, keepdim } => extreme(a, &reduced(dims, rank)?, *keepdim, false)?,
        Op::Argmax { dim: d, keepdim } => {
            let d = dim(*d, rank)?;
            if *keepdim {
                a.argmax_keepdim(d)?
            } else {
                a.argmax(d)?
            }
        }
        Op::Argmin { dim: d, keepdim } => {
            let d = dim(*d, rank)?;
            if *keepdim {
                a.argmin_keepdim(d)?
            } else {
                a.argmin(d)?
            }
        }
        Op::Sort { dim: d, descending } => {
            last_dim_only("Tensor::sort_last_dim", *d, rank)?;
            a.sort_last_dim(!descending)?.0
        }
        Op::Argsort { dim: d, descending } => {
            last_dim_only("Tensor::arg_sort_last_dim", *d, rank)?;
            a.arg_sort_last_dim(!descending)?
        }
        Op::Embedding => candle_nn::Embedding::new(x[1].clone(), x[1].dim(1)?).forward(a)?,
        Op::IndexSelect { dim: d } => a.index_select(x[1], dim(*d, rank)?)?,
        Op::Gather { dim: d } => a.gather(x[1], dim(*d, rank)?)?,
        Op::ScatterAdd { dim: d } => a.scatter_add(x[1], x[2], dim(*d, rank)?)?,
        Op::Scatter { dim: d } => a.scatter(x[1], x[2], dim(*d, rank)?)?,
        Op::IndexAdd { dim: d } => a.index_add(x[1], x[2], dim(*d, rank)?)?,
        Op::IndexPut { accumulate } => {
            if !accumulate {
                return unsupported(
                    "index_put without accumulate: candle 0.11.0 has no index_put or \
                     select_assign that replaces rows (Tensor::index_add only adds)",
                );
            }
            a.index_add(x[1], x[2], 0)?
        }
        Op::BceWithLogits => candle_nn::loss::binary_cross_entropy_with_logit(a, x[1])?,
        Op::CrossEntropy { reduction } => {
            mean_only("candle_nn::loss::cross_entropy", *reduction)?;
            candle_nn::loss::cross_entropy(a, x[1])?
        }
        Op::Nll { reduction } => {
            mean_only("candle_nn::loss::nll", *reduction)?;
            candle_nn::loss::nll(a, x[1])?
        }
        Op::Mse { reduction } => {
            mean_only("candle_nn::loss::mse", *reduction)?;
            candle_nn::loss::mse(a, x[1])?
        }
    })
}
