//! One op of a probe mapped onto burn's API: layout changes, convolutions and pooling,
//! linear algebra, element-wise ops ([`apply`]); reductions, sorting, indexing and losses
//! are in [`super::reduce`]. The module documentation of [`super`] has the table.

use burn::module::{Param, ParamId};
use burn::nn::interpolate::{Interpolate1dConfig, Interpolate2dConfig, InterpolateMode};
use burn::nn::loss::BinaryCrossEntropyLossConfig;
use burn::nn::RmsNorm;
use burn::tensor::activation::{
    elu, gelu, gelu_approximate, log_softmax, relu, sigmoid, silu, softmax, tanh,
};
use burn::tensor::module::{
    avg_pool1d, avg_pool2d, conv1d, conv2d, conv_transpose1d, conv_transpose2d, layer_norm, linear,
    max_pool1d, max_pool2d,
};
use burn::tensor::ops::{
    AvgPoolOptions, ConvOptions, ConvTransposeOptions, MaxPoolOptions, PadMode,
};
use burn::tensor::{Device, Int, Tensor};
use parity_common::probe_spec::{GeluApproximate, Op};
use parity_common::spec::FloatType;

use super::args::{same_shape, Args};
use super::dyn_tensor::{array, dim, Dyn, DynInt, Value};
use super::outcome::{framework, unsupported, Fault, Step};
use super::reduce;

/// A burn tensor of either kind as a [`Value`].
pub(crate) trait IntoValue {
    fn value(self) -> Value;
}

macro_rules! into_value {
    ($($d:literal),*) => {$(
        impl IntoValue for Tensor<$d> {
            fn value(self) -> Value {
                Value::Float(Dyn::from(self))
            }
        }
        impl IntoValue for Tensor<$d, Int> {
            fn value(self) -> Value {
                Value::Int(DynInt::from(self))
            }
        }
    )*};
}
into_value!(1, 2, 3, 4);

/// Evaluates `$body` with `$x` bound to the tensor of the [`Value`] `$v`, float or int, of
/// whatever rank (for layout changes, which burn offers for both kinds).
macro_rules! each_value {
    ($v:expr, $x:ident => $body:expr) => {
        match $v {
            Value::Float(d) => each_rank!(Dyn, d, $x => $body),
            Value::Int(d) => each_rank!(DynInt, d, $x => $body),
        }
    };
}

/// Applies one op to its inputs (their count is checked by the spec) in a run of dtype `ty`
/// on `dev`.
pub(crate) fn apply(op: &Op, inputs: Vec<Value>, ty: FloatType, dev: &Device) -> Step<Value> {
    let mut x = Args::new(op, inputs);
    Ok(match op {
        Op::Transpose { dim0, dim1 } => {
            let a = x.next()?;
            let rank = a.dims().len();
            let (d0, d1) = (dim(*dim0, rank)?, dim(*dim1, rank)?);
            each_value!(a, t => t.swap_dims(d0, d1).value())
        }
        Op::Narrow {
            dim: d,
            start,
            length,
        } => {
            let a = x.next()?;
            let d = dim(*d, a.dims().len())?;
            each_value!(a, t => t.narrow(d, *start, *length).value())
        }
        Op::BroadcastTo { shape } => {
            let a = x.next()?;
            each_value!(a, t => with_rank!(shape.len(), R => t.expand::<R, _>(array::<R>(shape)).value()))
        }
        Op::Unsqueeze { dim: d } => {
            let a = x.next()?;
            let rank = a.dims().len();
            let d = dim(*d, rank + 1)?;
            each_value!(a, t => with_rank!(rank + 1, R => t.unsqueeze_dim::<R>(d).value()))
        }
        Op::Squeeze { dim: d } => {
            let a = x.next()?;
            let rank = a.dims().len();
            let d = dim(*d, rank)?;
            each_value!(a, t => with_rank!(rank - 1, R => t.squeeze_dim::<R>(d).value()))
        }
        Op::Reshape { shape } => {
            let a = x.next()?;
            each_value!(a, t => with_rank!(shape.len(), R => t.reshape::<R, _>(array::<R>(shape)).value()))
        }
        Op::Contiguous => {
            return Err(unsupported(
                "contiguous: burn's tensor API has no contiguous copy (memory layout is the \
                 backend's)",
            ))
        }
        Op::Conv1d {
            padding,
            stride,
            dilation,
            groups,
        } => {
            let opts = ConvOptions::new([*stride], [*padding], [*dilation], *groups);
            let (a, w) = (x.ranked::<3>("input")?, x.ranked::<3>("kernel")?);
            Dyn::from(conv1d(a, w, None, opts)).into()
        }
        Op::Conv2d {
            padding,
            stride,
            dilation,
            groups,
        } => {
            let opts = ConvOptions::new(*stride, *padding, *dilation, *groups);
            let (a, w) = (x.ranked::<4>("input")?, x.ranked::<4>("kernel")?);
            Dyn::from(conv2d(a, w, None, opts)).into()
        }
        Op::ConvTranspose1d {
            padding,
            output_padding,
            stride,
            dilation,
            groups,
        } => {
            let opts = ConvTransposeOptions::new(
                [*stride],
                [*padding],
                [*output_padding],
                [*dilation],
                *groups,
            );
            let (a, w) = (x.ranked::<3>("input")?, x.ranked::<3>("kernel")?);
            Dyn::from(conv_transpose1d(a, w, bias(&mut x)?, opts)).into()
        }
        Op::ConvTranspose2d {
            padding,
            output_padding,
            stride,
            dilation,
            groups,
        } => {
            let opts =
                ConvTransposeOptions::new(*stride, *padding, *output_padding, *dilation, *groups);
            let (a, w) = (x.ranked::<4>("input")?, x.ranked::<4>("kernel")?);
            Dyn::from(conv_transpose2d(a, w, bias(&mut x)?, opts)).into()
        }
        Op::MaxPool1d {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        } => {
            let opts = MaxPoolOptions::new([*kernel])
                .with_stride([*stride])
                .with_padding([*padding])
                .with_dilation([*dilation])
                .with_ceil_mode(*ceil_mode);
            Dyn::from(max_pool1d(x.ranked::<3>("input")?, opts)).into()
        }
        Op::MaxPool2d {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        } => {
            let opts = MaxPoolOptions::new(*kernel)
                .with_stride(*stride)
                .with_padding(*padding)
                .with_dilation(*dilation)
                .with_ceil_mode(*ceil_mode);
            Dyn::from(max_pool2d(x.ranked::<4>("input")?, opts)).into()
        }
        Op::AvgPool1d {
            kernel,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        } => {
            let opts = AvgPoolOptions::new([*kernel])
                .with_stride([*stride])
                .with_padding([*padding])
                .with_count_include_pad(*count_include_pad)
                .with_ceil_mode(*ceil_mode);
            Dyn::from(avg_pool1d(x.ranked::<3>("input")?, opts)).into()
        }
        Op::AvgPool2d {
            kernel,
            stride,
            padding,
            count_include_pad,
            ceil_mode,
        } => {
            let opts = AvgPoolOptions::new(*kernel)
                .with_stride(*stride)
                .with_padding(*padding)
                .with_count_include_pad(*count_include_pad)
                .with_ceil_mode(*ceil_mode);
            Dyn::from(avg_pool2d(x.ranked::<4>("input")?, opts)).into()
        }
        Op::Pad { padding } => {
            let a = x.float("input")?;
            if padding.len() > a.rank() {
                return Err(framework(format!(
                    "pad: {} [before, after] pairs for rank {}",
                    padding.len(),
                    a.rank()
                )));
            }
            let pairs: Vec<(usize, usize)> = padding.iter().map(|[b, e]| (*b, *e)).collect();
            Value::from(each_rank!(a, t => Dyn::from(t.pad(pairs, PadMode::Constant(0.0)))))
        }
        Op::Linear => {
            let a = x.float("input")?;
            // PyTorch's weight [out, in] as burn's [in, out]: a transposed view in the graph,
            // so the gradient arrives in the probe's layout.
            let w = x.ranked::<2>("weight")?.transpose();
            let bias = bias(&mut x)?;
            Value::from(each_rank!(a, t => Dyn::from(linear(t, w, bias))))
        }
        Op::Matmul => {
            let (a, b) = (x.float("left factor")?, x.float("right factor")?);
            Value::from(each_rank!(a, t => {
                let u = b.like(&t, "matmul", "right factor")?;
                Dyn::from(t.matmul(u))
            }))
        }
        Op::LayerNorm { eps, .. } => {
            let a = x.float("input")?;
            let gamma = x.ranked::<1>("weight")?;
            let beta = x.ranked::<1>("bias")?;
            Value::from(each_rank!(a, t => Dyn::from(layer_norm(t, gamma, Some(beta), *eps))))
        }
        Op::RmsNorm { eps, .. } => {
            let a = x.float("input")?;
            let norm = RmsNorm {
                gamma: Param::initialized(ParamId::new(), x.ranked::<1>("weight")?),
                epsilon: *eps,
            };
            Value::from(each_rank!(a, t => Dyn::from(norm.forward(t))))
        }
        Op::Softmax { dim: d, .. } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            Value::from(each_rank!(a, t => Dyn::from(softmax(t, d))))
        }
        Op::LogSoftmax { dim: d } => {
            let a = x.float("input")?;
            let d = dim(*d, a.rank())?;
            Value::from(each_rank!(a, t => Dyn::from(log_softmax(t, d))))
        }
        Op::UpsampleNearest1d { size } => {
            let up = Interpolate1dConfig::new()
                .with_output_size(Some(*size))
                .with_mode(InterpolateMode::Nearest)
                .with_align_corners(false)
                .init();
            Dyn::from(up.forward(x.ranked::<3>("input")?)).into()
        }
        Op::UpsampleNearest2d { size } => {
            let up = Interpolate2dConfig::new()
                .with_output_size(Some(*size))
                .with_mode(InterpolateMode::Nearest)
                .with_align_corners(false)
                .init();
            Dyn::from(up.forward(x.ranked::<4>("input")?)).into()
        }
        Op::Relu => map(&mut x, |d| each_rank!(d, t => Dyn::from(relu(t))))?,
        Op::Abs => map(&mut x, |d| each_rank!(d, t => Dyn::from(t.abs())))?,
        Op::Sigmoid => map(&mut x, |d| each_rank!(d, t => Dyn::from(sigmoid(t))))?,
        Op::Tanh => map(&mut x, |d| each_rank!(d, t => Dyn::from(tanh(t))))?,
        Op::Silu => map(&mut x, |d| each_rank!(d, t => Dyn::from(silu(t))))?,
        Op::Gelu { approximate } => match approximate {
            GeluApproximate::None => map(&mut x, |d| each_rank!(d, t => Dyn::from(gelu(t))))?,
            GeluApproximate::Tanh => map(
                &mut x,
                |d| each_rank!(d, t => Dyn::from(gelu_approximate(t))),
            )?,
        },
        Op::Elu { alpha } => map(&mut x, |d| each_rank!(d, t => Dyn::from(elu(t, *alpha))))?,
        Op::Exp => map(&mut x, |d| each_rank!(d, t => Dyn::from(t.exp())))?,
        Op::Log => map(&mut x, |d| each_rank!(d, t => Dyn::from(t.log())))?,
        Op::Sqrt => map(&mut x, |d| each_rank!(d, t => Dyn::from(t.sqrt())))?,
        Op::Add => binary(
            &mut x,
            |t, u| t + u,
            |t, u| t + u,
            |t, u| t + u,
            |t, u| t + u,
        )?,
        Op::Sub => binary(
            &mut x,
            |t, u| t - u,
            |t, u| t - u,
            |t, u| t - u,
            |t, u| t - u,
        )?,
        Op::Mul => binary(
            &mut x,
            |t, u| t * u,
            |t, u| t * u,
            |t, u| t * u,
            |t, u| t * u,
        )?,
        Op::Div => binary(
            &mut x,
            |t, u| t / u,
            |t, u| t / u,
            |t, u| t / u,
            |t, u| t / u,
        )?,
        Op::Maximum => binary(
            &mut x,
            |t, u| t.max_pair(u),
            |t, u| t.max_pair(u),
            |t, u| t.max_pair(u),
            |t, u| t.max_pair(u),
        )?,
        Op::Minimum => binary(
            &mut x,
            |t, u| t.min_pair(u),
            |t, u| t.min_pair(u),
            |t, u| t.min_pair(u),
            |t, u| t.min_pair(u),
        )?,
        Op::BceWithLogits => {
            let (a, targets) = (x.float("logits")?, x.float("target")?);
            same_shape("bce_with_logits", &a, &targets)?;
            let values = targets.clone().host(ty).map_err(Fault::Spec)?;
            if let Some(v) = values.widened().into_iter().find(|v| v.fract() != 0.0) {
                return Err(unsupported(format!(
                    "bce_with_logits: burn's BinaryCrossEntropyLoss takes integer targets, got {v}"
                )));
            }
            let loss = BinaryCrossEntropyLossConfig::new()
                .with_logits(true)
                .with_weights(None)
                .with_smoothing(None)
                .init(dev);
            Value::from(each_rank!(a, t => {
                let u = targets.like(&t, "bce_with_logits", "target")?;
                Dyn::from(loss.forward(t, u.int()))
            }))
        }
        _ => reduce::apply(op, &mut x, dev)?,
    })
}

/// The optional last input, a bias `[c]`, as the rank-1 tensor burn's functions take.
fn bias(x: &mut Args) -> Step<Option<Tensor<1>>> {
    let op = x.op();
    match x.optional_float("bias")? {
        Some(b) => Ok(Some(b.to::<Tensor<1>>(op, "bias")?)),
        None => Ok(None),
    }
}

/// An element-wise op of one float tensor.
fn map(x: &mut Args, f: impl FnOnce(Dyn) -> Dyn) -> Step<Value> {
    Ok(f(x.float("input")?).into())
}

/// An element-wise op of two float tensors of equal shapes (refused otherwise, as PyTorch's
/// interpreter refuses them: no implicit broadcasting).
fn binary(
    x: &mut Args,
    f1: impl FnOnce(Tensor<1>, Tensor<1>) -> Tensor<1>,
    f2: impl FnOnce(Tensor<2>, Tensor<2>) -> Tensor<2>,
    f3: impl FnOnce(Tensor<3>, Tensor<3>) -> Tensor<3>,
    f4: impl FnOnce(Tensor<4>, Tensor<4>) -> Tensor<4>,
) -> Step<Value> {
    let op = x.op();
    let (a, b) = (x.float("first operand")?, x.float("second operand")?);
    same_shape(op, &a, &b)?;
    let role = "second operand";
    Ok(match a {
        Dyn::R1(t) => Dyn::from(f1(t, b.to(op, role)?)),
        Dyn::R2(t) => Dyn::from(f2(t, b.to(op, role)?)),
        Dyn::R3(t) => Dyn::from(f3(t, b.to(op, role)?)),
        Dyn::R4(t) => Dyn::from(f4(t, b.to(op, role)?)),
    }
    .into())
}
