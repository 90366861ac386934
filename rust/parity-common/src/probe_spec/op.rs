//! The op language of the probes: every op with its documented arguments ([`Op`]), the
//! argument types it shares ([`OpVariant`], [`GeluApproximate`], [`Reduction`]) and signed
//! dimensions ([`dim_index`]). Long: it is the whole normalized op contract, one variant per
//! op of `schemas/probe.schema.yaml`, in one place both runners match on.

use serde::Deserialize;

/// A signed dimension (negative counts from the end, as in PyTorch) as an index below
/// `rank`, or `None` when it is out of range.
pub fn dim_index(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let i = if d < 0 { d + r } else { d };
    (0..r).contains(&i).then_some(i as usize)
}

/// PyTorch 2.15's pooling output size along one axis (ATen's `pooling_output_shape`):
/// ⌊(size + 2·padding − dilation·(kernel − 1) − 1 + (stride − 1 in ceil mode)) / stride⌋ + 1,
/// less one in ceil mode when the last window would start at or past `size + padding` (past
/// the input and its left padding). `None` when that is below 1 (PyTorch refuses it).
pub fn pool_size(
    size: usize,
    kernel: usize,
    padding: usize,
    stride: usize,
    dilation: usize,
    ceil_mode: bool,
) -> Option<usize> {
    let (size, kernel, padding) = (size as i64, kernel as i64, padding as i64);
    let (stride, dilation) = (stride.max(1) as i64, dilation as i64);
    let extra = if ceil_mode { stride - 1 } else { 0 };
    let mut n = (size + 2 * padding - dilation * (kernel - 1) - 1 + extra).div_euclid(stride) + 1;
    if ceil_mode && (n - 1) * stride >= size + padding {
        n -= 1;
    }
    (n >= 1).then_some(n as usize)
}

/// Which of two functions computes an op that a framework has twice: candle's fused
/// single-kernel one or its reference built from elementary ops (the JSON field `candle` of
/// `layer_norm` and `softmax`, values `fused` and `slow`). Runners of frameworks with one
/// function for the op (burn) ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpVariant {
    /// The single-kernel `candle_nn::ops` function (`layer_norm`, `softmax_last_dim`).
    Fused,
    /// The reference built from elementary tensor ops (`layer_norm_slow`, `softmax`).
    Slow,
}

/// GELU's form (PyTorch's `approximate` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeluApproximate {
    /// x·Φ(x) with the error function (PyTorch `approximate='none'`).
    None,
    /// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    Tanh,
}

/// How a loss reduces its per-element values (PyTorch's `reduction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reduction {
    /// The mean over the elements (for `cross_entropy`/`nll`: over the samples).
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one value per element (per sample).
    None,
}

/// One op and its arguments (see the schema for what each computes, and which framework
/// function runs it). Dimensions are signed: negative counts from the end, as in PyTorch.
/// Every argument is explicit (the workflow fills in the schema's defaults); pairs
/// (`[h, w]`) are always pairs. Ops marked *integer output* produce int64 values, sent as
/// float64 in the `result` frame and compared exactly.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    // ----- layout changes -----
    /// Swap two dimensions (a strided view).
    Transpose {
        /// First dimension.
        dim0: i64,
        /// Second dimension.
        dim1: i64,
    },
    /// `length` elements of `dim` from `start` (a view with an offset).
    Narrow {
        /// Dimension.
        dim: i64,
        /// First element kept.
        start: usize,
        /// Elements kept.
        length: usize,
    },
    /// Expand to `shape` with stride 0 along broadcast dimensions.
    BroadcastTo {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// Insert a dimension of size 1.
    Unsqueeze {
        /// Position of the new dimension.
        dim: i64,
    },
    /// Drop a dimension of size 1.
    Squeeze {
        /// Dimension.
        dim: i64,
    },
    /// Reshape (a copy when the input is not contiguous).
    Reshape {
        /// Target shape.
        shape: Vec<usize>,
    },
    /// A contiguous copy.
    Contiguous,
    // ----- convolutions and pooling -----
    /// 1-D convolution of `[b, c_in, l]` with a `[c_out, c_in/groups, k]` kernel, no bias.
    Conv1d {
        /// Zero padding on both sides.
        padding: usize,
        /// Stride.
        stride: usize,
        /// Dilation.
        dilation: usize,
        /// Groups.
        groups: usize,
    },
    /// 2-D convolution of `[b, c_in, h, w]` with a `[c_out, c_in/groups, kh, kw]` kernel, no
    /// bias; padding, stride and dilation per axis `[h, w]`.
    Conv2d {
        /// Zero padding per axis, on both sides.
        padding: [usize; 2],
        /// Stride per axis.
        stride: [usize; 2],
        /// Dilation per axis.
        dilation: [usize; 2],
        /// Groups.
        groups: usize,
    },
    /// Transposed 1-D convolution of `[b, c_in, l]` with a `[c_in, c_out/groups, k]` kernel
    /// (PyTorch's layout) and an optional third input, a bias `[c_out]`: output length
    /// (l − 1)·stride − 2·padding + dilation·(k − 1) + output_padding + 1.
    ConvTranspose1d {
        /// Padding.
        padding: usize,
        /// Extra length on one side of the output.
        output_padding: usize,
        /// Stride.
        stride: usize,
        /// Dilation.
        dilation: usize,
        /// Groups.
        groups: usize,
    },
    /// Transposed 2-D convolution of `[b, c_in, h, w]` with a `[c_in, c_out/groups, kh, kw]`
    /// kernel and an optional bias `[c_out]`; every argument per axis except `groups`.
    ConvTranspose2d {
        /// Padding per axis.
        padding: [usize; 2],
        /// Output padding per axis.
        output_padding: [usize; 2],
        /// Stride per axis.
        stride: [usize; 2],
        /// Dilation per axis.
        dilation: [usize; 2],
        /// Groups.
        groups: usize,
    },
    /// Max pooling of `[b, c, l]` (padding counts as −∞); output length PyTorch's
    /// (`pooling_output_shape`, with `dilation` and `ceil_mode`).
    MaxPool1d {
        /// Window length.
        kernel: usize,
        /// Stride (the workflow's default: the kernel).
        stride: usize,
        /// Padding on both sides.
        padding: usize,
        /// Spacing of the window's elements.
        dilation: usize,
        /// Round the output length up instead of down.
        ceil_mode: bool,
    },
    /// Max pooling of `[b, c, h, w]`, every argument but `ceil_mode` per axis.
    MaxPool2d {
        /// Window.
        kernel: [usize; 2],
        /// Stride (default: the kernel).
        stride: [usize; 2],
        /// Padding.
        padding: [usize; 2],
        /// Spacing of the window's elements.
        dilation: [usize; 2],
        /// Round the output sizes up instead of down.
        ceil_mode: bool,
    },
    /// Average pooling of `[b, c, l]`: the divisor is the window clipped to the padded input
    /// (`count_include_pad`, PyTorch's default) or the input elements in it.
    AvgPool1d {
        /// Window length.
        kernel: usize,
        /// Stride (default: the kernel).
        stride: usize,
        /// Padding on both sides.
        padding: usize,
        /// Count the padding zeros in the divisor.
        count_include_pad: bool,
        /// Round the output length up instead of down.
        ceil_mode: bool,
    },
    /// Average pooling of `[b, c, h, w]`, as [`Op::AvgPool1d`] per axis.
    AvgPool2d {
        /// Window.
        kernel: [usize; 2],
        /// Stride (default: the kernel).
        stride: [usize; 2],
        /// Padding.
        padding: [usize; 2],
        /// Count the padding zeros in the divisor.
        count_include_pad: bool,
        /// Round the output sizes up instead of down.
        ceil_mode: bool,
    },
    /// Zero padding of the last `padding.len()` dimensions: `[before, after]` per
    /// dimension, the last dimension last (PyTorch's `F.pad` lists them in reverse).
    Pad {
        /// `[before, after]` per padded dimension.
        padding: Vec<[usize; 2]>,
    },
    // ----- linear algebra and normalisation -----
    /// `x·weightᵀ (+ bias)`: inputs `[x, weight]` or `[x, weight, bias]`.
    Linear,
    /// Batched matrix product with equal batch dimensions.
    Matmul,
    /// Layer norm over the last dimension: inputs `[x, weight, bias]`.
    LayerNorm {
        /// ε added to the variance (candle takes it as f32).
        eps: f64,
        /// Fused or slow candle function.
        candle: OpVariant,
    },
    /// RMS norm over the last dimension: inputs `[x, weight]`.
    RmsNorm {
        /// ε added to the mean of the squares (candle takes it as f32).
        eps: f64,
        /// Fused or slow candle function.
        candle: OpVariant,
    },
    /// Softmax along `dim` (fused: the last dimension only).
    Softmax {
        /// Dimension.
        dim: i64,
        /// Fused or slow candle function.
        candle: OpVariant,
    },
    /// log(softmax(x)) along `dim`.
    LogSoftmax {
        /// Dimension.
        dim: i64,
    },
    /// Nearest upsampling `[b, c, l]` → `[b, c, size]`.
    UpsampleNearest1d {
        /// Output length.
        size: usize,
    },
    /// Nearest upsampling `[b, c, h, w]` → `[b, c, size[0], size[1]]`.
    UpsampleNearest2d {
        /// Output height and width.
        size: [usize; 2],
    },
    // ----- element-wise -----
    /// max(x, 0).
    Relu,
    /// |x|.
    Abs,
    /// 1 / (1 + e^(−x)).
    Sigmoid,
    /// tanh(x).
    Tanh,
    /// x·sigmoid(x).
    Silu,
    /// GELU, exact or with the tanh approximation.
    Gelu {
        /// Which form.
        approximate: GeluApproximate,
    },
    /// x for x > 0, alpha·(eˣ − 1) otherwise.
    Elu {
        /// α.
        alpha: f64,
    },
    /// eˣ.
    Exp,
    /// ln x.
    Log,
    /// √x.
    Sqrt,
    /// Element-wise sum of two equal shapes.
    Add,
    /// Element-wise difference a − b of two equal shapes.
    Sub,
    /// Element-wise product of two equal shapes.
    Mul,
    /// Element-wise quotient a / b of two equal shapes.
    Div,
    /// Element-wise max(a, b) of two equal shapes (ties: half the gradient to each side).
    Maximum,
    /// Element-wise min(a, b) of two equal shapes (ties: half the gradient to each side).
    Minimum,
    // ----- reductions (`dims: None` reduces every dimension) -----
    /// Sum over `dims`.
    Sum {
        /// Dimensions, or every one.
        dims: Option<Vec<i64>>,
        /// Keep reduced dimensions with size 1.
        keepdim: bool,
    },
    /// Mean over `dims`.
    Mean {
        /// Dimensions, or every one.
        dims: Option<Vec<i64>>,
        /// Keep reduced dimensions with size 1.
        keepdim: bool,
    },
    /// Maximum over `dims` (PyTorch `amax`: the gradient is shared equally among ties).
    Max {
        /// Dimensions, or every one.
        dims: Option<Vec<i64>>,
        /// Keep reduced dimensions with size 1.
        keepdim: bool,
    },
    /// Minimum over `dims` (PyTorch `amin`: the gradient is shared equally among ties).
    Min {
        /// Dimensions, or every one.
        dims: Option<Vec<i64>>,
        /// Keep reduced dimensions with size 1.
        keepdim: bool,
    },
    /// Index of the maximum along `dim` (the first among ties). *Integer output.*
    Argmax {
        /// Dimension.
        dim: i64,
        /// Keep the reduced dimension with size 1.
        keepdim: bool,
    },
    /// Index of the minimum along `dim` (the first among ties). *Integer output.*
    Argmin {
        /// Dimension.
        dim: i64,
        /// Keep the reduced dimension with size 1.
        keepdim: bool,
    },
    /// The values sorted along `dim` (stable: ties keep their order).
    Sort {
        /// Dimension.
        dim: i64,
        /// Largest first.
        descending: bool,
    },
    /// The indices that sort along `dim` (stable). *Integer output.*
    Argsort {
        /// Dimension.
        dim: i64,
        /// Largest first.
        descending: bool,
    },
    // ----- indexing (index inputs are int64) -----
    /// `[indices (int64, any shape), weight [v, d]]` → `[..., d]` (PyTorch `F.embedding`
    /// argument order); repeated indices add their gradients.
    Embedding,
    /// `[x, index (int64, 1-D)]`: the slices `index` of `dim`.
    IndexSelect {
        /// Dimension.
        dim: i64,
    },
    /// `[x, index (int64, x's rank)]`: out[i][j] = x[index[i][j]][j] for `dim` 0, and so on.
    Gather {
        /// Dimension.
        dim: i64,
    },
    /// `[x, index (int64, src's shape), src]`: x with `src` added at the positions `index`
    /// names along `dim` (out[index[i][j]][j] += src[i][j] for dim 0, and so on); repeated
    /// indices add up. Gradients: x's is the output's, src's the output's gathered at `index`.
    ScatterAdd {
        /// Dimension.
        dim: i64,
    },
    /// `[x, index (int64, src's shape), src]`: x with `src` written at the positions `index`
    /// names along `dim` (out[index[i][j]][j] = src[i][j] for dim 0). Indices must not
    /// repeat (PyTorch leaves which write wins undefined). Gradients: x's is the output's
    /// with the written positions zeroed, src's the output's gathered at `index`.
    Scatter {
        /// Dimension.
        dim: i64,
    },
    /// `[x, index (int64, 1-D), src]`: x with the slices of `src` added to the slices
    /// `index` of `dim` (src: x's shape with dim's size len(index)); repeated indices add up.
    /// Gradients: x's is the output's, src's the output's slices `index` of `dim`.
    IndexAdd {
        /// Dimension.
        dim: i64,
    },
    /// `[x, index (int64, 1-D), values]`: x with the rows `index` of dimension 0 replaced by
    /// `values` (`[len(index), ...x's shape[1..]]`), or `values` added to them
    /// (`accumulate`; repeated indices then add up). Without `accumulate` indices must not
    /// repeat. PyTorch's `index_put` with one index tensor, burn's `select_assign`.
    IndexPut {
        /// Add instead of replace.
        accumulate: bool,
    },
    // ----- losses -----
    /// Mean binary cross-entropy of `[logits, targets]` (a scalar).
    BceWithLogits,
    /// Cross-entropy of `[logits [n, c], targets (int64) [n]]` (log-softmax over classes).
    CrossEntropy {
        /// Reduction over the samples.
        reduction: Reduction,
    },
    /// Negative log-likelihood of `[log_probs [n, c], targets (int64) [n]]`.
    Nll {
        /// Reduction over the samples.
        reduction: Reduction,
    },
    /// Squared error of `[a, b]` (equal shapes).
    Mse {
        /// Reduction over the elements.
        reduction: Reduction,
    },
}

impl Op {
    /// How many input tensors the op takes: (least, most).
    pub fn arity(&self) -> (usize, usize) {
        match self {
            Op::Linear | Op::ConvTranspose1d { .. } | Op::ConvTranspose2d { .. } => (2, 3),
            Op::LayerNorm { .. }
            | Op::ScatterAdd { .. }
            | Op::Scatter { .. }
            | Op::IndexAdd { .. }
            | Op::IndexPut { .. } => (3, 3),
            Op::Conv1d { .. }
            | Op::Conv2d { .. }
            | Op::Matmul
            | Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Maximum
            | Op::Minimum
            | Op::RmsNorm { .. }
            | Op::Embedding
            | Op::IndexSelect { .. }
            | Op::Gather { .. }
            | Op::BceWithLogits
            | Op::CrossEntropy { .. }
            | Op::Nll { .. }
            | Op::Mse { .. } => (2, 2),
            _ => (1, 1),
        }
    }

    /// Whether the op's result is int64 (indices).
    pub fn integer_output(&self) -> bool {
        matches!(
            self,
            Op::Argmax { .. } | Op::Argmin { .. } | Op::Argsort { .. }
        )
    }

    /// The positions of the op's inputs that must be int64 (indices, class targets); every
    /// other input is a float tensor.
    pub fn integer_inputs(&self) -> &'static [usize] {
        match self {
            Op::Embedding => &[0],
            Op::IndexSelect { .. }
            | Op::Gather { .. }
            | Op::ScatterAdd { .. }
            | Op::Scatter { .. }
            | Op::IndexAdd { .. }
            | Op::IndexPut { .. }
            | Op::CrossEntropy { .. }
            | Op::Nll { .. } => &[1],
            _ => &[],
        }
    }
}
