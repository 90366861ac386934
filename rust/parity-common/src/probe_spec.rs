//! The probe specification: one op probe, normalized by the workflow.
//!
//! A probe file (`probes/{name}.yaml`, schema `schemas/probe.schema.yaml`) is validated and
//! normalized by `scripts/parity/probe/format.py` (`Probe.runner_spec`): inputs expanded to flat
//! float64 values with their shape, every op argument explicit, the loss as a list of terms.
//! Nothing here has a default and unknown fields are an error, so a drift between the two
//! sides fails loudly. Reference values and known bugs stay on the Python side, which judges.
//!
//! Every runner reports its outcomes the same way: one `result` frame per (case, quantity)
//! whose metadata is [`result_meta`] with a [`Status`].
//!
//! Long (with its tests): this is the whole normalized contract, every op of the probe
//! language with its documented arguments, in one place both runners match on.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::frames::meta;
use crate::spec::{DeviceKind, FloatType};

/// What a runner reports for one (case, quantity): the `status` of its `result` frame, one of
/// the Python side's `probe_results.STATUSES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The values, in the run dtype, are in the frame's `values` tensor.
    Ok,
    /// The framework gave no gradient for the input.
    MissingGradient,
    /// The framework raised an error (or panicked) before the quantity was known; the
    /// message says what.
    FrameworkError,
    /// The framework's API offers no way to compute the case (an op or an argument it
    /// lacks, or one the runner's interpreter does not map); the message says which.
    Unsupported,
}

impl Status {
    /// The name in the frame and in the result file: `ok`, `missing-gradient`,
    /// `framework-error`, `unsupported`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::MissingGradient => "missing-gradient",
            Status::FrameworkError => "framework-error",
            Status::Unsupported => "unsupported",
        }
    }
}

/// Metadata of the `result` frame of one (probe, case, quantity): `kind` `result`, `probe`,
/// `case`, `quantity`, `status` ([`Status::name`]) and `message` (empty unless the framework
/// raised or cannot run the case). With [`Status::Ok`] the frame holds one tensor `values`
/// with the quantity's shape, in the run dtype, or float32 for a half-precision run and
/// float64 for an integer quantity (both exact widenings).
pub fn result_meta(
    probe: &str,
    case: &str,
    quantity: &str,
    status: Status,
    message: &str,
) -> HashMap<String, String> {
    meta([
        ("kind", "result".into()),
        ("probe", probe.into()),
        ("case", case.into()),
        ("quantity", quantity.into()),
        ("status", status.name().into()),
        ("message", message.into()),
    ])
}

/// A signed dimension (negative counts from the end, as in PyTorch) as an index below
/// `rank`, or `None` when it is out of range.
pub fn dim_index(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let i = if d < 0 { d + r } else { d };
    (0..r).contains(&i).then_some(i as usize)
}

/// The dtype of a probe run: the training dtypes plus the half-precision ones (probes only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeDtype {
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (8 exponent bits, 7 fraction bits).
    Bf16,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
}

impl ProbeDtype {
    /// The short name used in paths and metadata (`f16`, `bf16`, `f32`, `f64`).
    pub fn name(self) -> &'static str {
        match self {
            ProbeDtype::F16 => "f16",
            ProbeDtype::Bf16 => "bf16",
            ProbeDtype::F32 => "f32",
            ProbeDtype::F64 => "f64",
        }
    }

    /// The training dtype of the same name, or `None` for a half-precision one.
    pub fn float_type(self) -> Option<FloatType> {
        match self {
            ProbeDtype::F32 => Some(FloatType::F32),
            ProbeDtype::F64 => Some(FloatType::F64),
            ProbeDtype::F16 | ProbeDtype::Bf16 => None,
        }
    }
}

/// The element type of an input: the run's float dtype, or 64-bit integers (indices,
/// class targets) whatever the run's dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InputKind {
    /// Float values rounded once to the run's dtype.
    Float,
    /// Integer values (exact in the float64 list); never `requires_grad`.
    Int64,
}

/// Reads a list of float64 values where a non-finite value is written as the string `inf`,
/// `-inf` or `nan` (JSON has no literal for them; `Probe.runner_spec` writes them so).
fn de_values<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(f64),
        Text(String),
    }
    Vec::<Value>::deserialize(d)?
        .into_iter()
        .map(|v| match v {
            Value::Number(x) => Ok(x),
            Value::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(serde::de::Error::custom(format!(
                    "{other:?} is not a number (only \"inf\", \"-inf\" and \"nan\" are)"
                ))),
            },
        })
        .collect()
}

/// A named input tensor.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Name the steps refer to.
    pub name: String,
    /// Element type.
    pub dtype: InputKind,
    /// Shape; `[]` is a scalar.
    pub shape: Vec<usize>,
    /// Row-major float64 values, `shape.iter().product()` of them, rounded once to the run's
    /// dtype (integers for [`InputKind::Int64`]); ±∞ and NaN allowed.
    #[serde(deserialize_with = "de_values")]
    pub values: Vec<f64>,
    /// A leaf whose gradient may be compared (a `Var` on the candle side).
    pub requires_grad: bool,
}

/// Which candle function computes an op that candle has twice. Runners of frameworks with
/// one function for the op (burn) ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandleImpl {
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
    /// (PyTorch's layout), no bias: output length (l − 1)·stride − 2·padding +
    /// dilation·(k − 1) + output_padding + 1.
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
    /// kernel, no bias; every argument per axis except `groups`.
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
    /// Max pooling of `[b, c, l]` (padding counts as −∞).
    MaxPool1d {
        /// Window length.
        kernel: usize,
        /// Stride (the workflow's default: the kernel).
        stride: usize,
        /// Padding on both sides.
        padding: usize,
    },
    /// Max pooling of `[b, c, h, w]`, every argument per axis.
    MaxPool2d {
        /// Window.
        kernel: [usize; 2],
        /// Stride (default: the kernel).
        stride: [usize; 2],
        /// Padding.
        padding: [usize; 2],
    },
    /// Average pooling of `[b, c, h, w]` (padding zeros counted in the mean, PyTorch's
    /// `count_include_pad=True`).
    AvgPool2d {
        /// Window.
        kernel: [usize; 2],
        /// Stride (default: the kernel).
        stride: [usize; 2],
        /// Padding.
        padding: [usize; 2],
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
        candle: CandleImpl,
    },
    /// Softmax along `dim` (fused: the last dimension only).
    Softmax {
        /// Dimension.
        dim: i64,
        /// Fused or slow candle function.
        candle: CandleImpl,
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
            Op::Linear => (2, 3),
            Op::LayerNorm { .. } => (3, 3),
            Op::Conv1d { .. }
            | Op::Conv2d { .. }
            | Op::ConvTranspose1d { .. }
            | Op::ConvTranspose2d { .. }
            | Op::Matmul
            | Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
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
            | Op::CrossEntropy { .. }
            | Op::Nll { .. } => &[1],
            _ => &[],
        }
    }
}

/// One step: `out = op(inputs…)`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Name of the result; new within its case.
    pub out: String,
    /// Names of the inputs (probe inputs or earlier steps' outs).
    pub inputs: Vec<String>,
    /// The op.
    pub op: Op,
}

/// One term of the scalar loss; terms are added in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossTerm {
    /// Sum of every element.
    Sum {
        /// Tensor name.
        input: String,
    },
    /// Sum of squares of every element.
    SumSquares {
        /// Tensor name.
        input: String,
    },
    /// Sum of `input·weights` over every element (equal shapes).
    WeightedSum {
        /// Tensor name.
        input: String,
        /// Tensor name.
        weights: String,
    },
}

impl LossTerm {
    /// The tensor names the term reads.
    pub fn names(&self) -> Vec<&str> {
        match self {
            LossTerm::Sum { input } | LossTerm::SumSquares { input } => vec![input],
            LossTerm::WeightedSum { input, weights } => vec![input, weights],
        }
    }
}

/// The optimizer that steps every input with `requires_grad`, every hyperparameter explicit.
/// Formulas: PyTorch's documentation of `torch.optim.SGD`, `Adam` and `AdamW` (2.15).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProbeOptimizer {
    /// g ← g + λθ; with momentum μ: b ← μ·b + (1 − dampening)·g (b = g at the first step),
    /// g ← g + μ·b (nesterov) or b; θ ← θ − lr·g.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// μ (0: plain SGD, no buffer).
        momentum: f64,
        /// Dampening of the buffer.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 weight decay λ (added to the gradient).
        weight_decay: f64,
    },
    /// Adam with L2 weight decay (λθ added to the gradient), bias-corrected moments.
    Adam {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// L2 weight decay λ.
        weight_decay: f64,
    },
    /// AdamW: decoupled weight decay θ ← θ·(1 − lr·λ) before the Adam step.
    Adamw {
        /// Learning rate.
        lr: f64,
        /// (β₁, β₂).
        betas: [f64; 2],
        /// ε added to √v̂.
        eps: f64,
        /// Decoupled weight decay λ.
        weight_decay: f64,
    },
}

/// A slot of the optimizer's per-parameter state, named as in PyTorch's `state_dict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSlot {
    /// Adam/AdamW first moment m.
    ExpAvg,
    /// Adam/AdamW second moment v.
    ExpAvgSq,
    /// SGD momentum buffer b.
    MomentumBuffer,
}

impl StateSlot {
    /// The quantity suffix: `exp_avg`, `exp_avg_sq`, `momentum_buffer`.
    pub fn name(self) -> &'static str {
        match self {
            StateSlot::ExpAvg => "exp_avg",
            StateSlot::ExpAvgSq => "exp_avg_sq",
            StateSlot::MomentumBuffer => "momentum_buffer",
        }
    }
}

/// What a case reports: parsed from `loss`, `<name>`, `<input>.grad`, `<input>.after_step`,
/// `<input>.exp_avg`, `<input>.exp_avg_sq`, `<input>.momentum_buffer`.
///
/// With `optimizer_steps` n > 1 the case is a training loop of n iterations (forward,
/// loss, backward, optimizer step) and every quantity is recorded at each iteration and
/// stacked along a new leading dimension of length n (row k: iteration k + 1; a state slot
/// and `after_step` after that iteration's update, a gradient before it). With n = 1 the
/// quantities have their own shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Quantity {
    /// The scalar loss.
    Loss,
    /// Forward values of a named tensor.
    Value(String),
    /// Gradient of an input with `requires_grad`.
    Grad(String),
    /// Value of an input with `requires_grad` after the optimizer step.
    AfterStep(String),
    /// The optimizer's state for an input with `requires_grad`, after the step.
    State(String, StateSlot),
}

impl Quantity {
    /// Parses a quantity name.
    ///
    /// # Errors
    /// For an unknown suffix.
    pub fn parse(q: &str) -> Result<Self> {
        Ok(match q.split_once('.') {
            None if q == "loss" => Quantity::Loss,
            None => Quantity::Value(q.to_string()),
            Some((n, "grad")) => Quantity::Grad(n.to_string()),
            Some((n, "after_step")) => Quantity::AfterStep(n.to_string()),
            Some((n, "exp_avg")) => Quantity::State(n.to_string(), StateSlot::ExpAvg),
            Some((n, "exp_avg_sq")) => Quantity::State(n.to_string(), StateSlot::ExpAvgSq),
            Some((n, "momentum_buffer")) => {
                Quantity::State(n.to_string(), StateSlot::MomentumBuffer)
            }
            Some((_, s)) => bail!("quantity {q:?}: unknown suffix {s:?}"),
        })
    }
}

impl CaseSpec {
    /// The case's `compare` list, parsed, in order.
    ///
    /// # Errors
    /// For a quantity [`Quantity::parse`] refuses.
    pub fn quantities(&self) -> Result<Vec<Quantity>> {
        self.compare.iter().map(|q| Quantity::parse(q)).collect()
    }
}

/// One case: steps, optional loss and optimizer, and the quantities to report.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSpec {
    /// Case name.
    pub name: String,
    /// Steps in order.
    pub steps: Vec<StepSpec>,
    /// Loss terms, or `None` for a forward-only case.
    pub loss: Option<Vec<LossTerm>>,
    /// The optimizer stepped after each `loss.backward()`.
    pub optimizer: Option<ProbeOptimizer>,
    /// Iterations of forward, backward and optimizer step (1 without an optimizer); see
    /// [`Quantity`] for how quantities are stacked when it exceeds 1.
    pub optimizer_steps: usize,
    /// Quantities to report, in order.
    pub compare: Vec<String>,
}

/// One probe run: the probe in one dtype on one device.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    /// Probe name (the file name without `.yaml`).
    pub probe: String,
    /// Run dtype.
    pub dtype: ProbeDtype,
    /// Device.
    pub device: DeviceKind,
    /// Inputs, shared by every case (each case starts from fresh tensors).
    pub inputs: Vec<InputSpec>,
    /// Cases in order.
    pub cases: Vec<CaseSpec>,
}

/// Several probes run by one process (`probe --spec`): the workflow batches every probe of a
/// (framework, dtype, device) so that a process starts once, not once per probe.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeBatch {
    /// The probes, in the order their frames are written.
    pub probes: Vec<ProbeSpec>,
}

impl ProbeBatch {
    /// Parses and checks a batch (each spec as [`ProbeSpec::from_json`] does).
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or a spec that cannot run (named by its probe).
    pub fn from_json(text: &str) -> Result<Self> {
        let batch: ProbeBatch =
            serde_json::from_str(text).context("parsing the probe batch JSON")?;
        for spec in &batch.probes {
            spec.check()
                .with_context(|| format!("in probe {:?}", spec.probe))?;
        }
        Ok(batch)
    }

    /// Reads a batch from a file; see [`ProbeBatch::from_json`].
    ///
    /// # Errors
    /// As [`ProbeBatch::from_json`], or when the file cannot be read.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading probe batch {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in probe batch {}", path.display()))
    }
}

impl ProbeSpec {
    /// Parses and checks a spec.
    ///
    /// # Errors
    /// Malformed JSON, an unknown field, or a spec that cannot run: values that do not fill
    /// their shape, a name used before it is defined or defined twice, an op with the wrong
    /// number of inputs, a quantity that does not exist, an optimizer without a loss, an
    /// integer input with a gradient or a non-integer value.
    pub fn from_json(text: &str) -> Result<Self> {
        let spec: ProbeSpec = serde_json::from_str(text).context("parsing the probe spec JSON")?;
        spec.check()?;
        Ok(spec)
    }

    /// Reads a spec from a file; see [`ProbeSpec::from_json`].
    ///
    /// # Errors
    /// As [`ProbeSpec::from_json`], or when the file cannot be read.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading probe spec {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("in probe spec {}", path.display()))
    }

    /// The input called `name`.
    pub fn input(&self, name: &str) -> Option<&InputSpec> {
        self.inputs.iter().find(|i| i.name == name)
    }

    fn check(&self) -> Result<()> {
        let mut inputs = HashSet::new();
        for i in &self.inputs {
            if !inputs.insert(i.name.as_str()) {
                bail!("input {:?} is defined twice", i.name);
            }
            let n: usize = i.shape.iter().product();
            if n != i.values.len() {
                bail!(
                    "input {:?}: shape {:?} holds {n} values, {} given",
                    i.name,
                    i.shape,
                    i.values.len()
                );
            }
            if i.dtype == InputKind::Int64 {
                if i.requires_grad {
                    bail!("input {:?}: an int64 input has no gradient", i.name);
                }
                if let Some(v) = i.values.iter().find(|v| v.fract() != 0.0 || !v.is_finite()) {
                    bail!("input {:?}: int64 value {v} is not an integer", i.name);
                }
            }
        }
        for case in &self.cases {
            self.check_case(case, &inputs)
                .with_context(|| format!("case {:?}", case.name))?;
        }
        Ok(())
    }

    fn check_case(&self, case: &CaseSpec, inputs: &HashSet<&str>) -> Result<()> {
        let mut known: HashSet<&str> = inputs.clone();
        for (i, step) in case.steps.iter().enumerate() {
            let (least, most) = step.op.arity();
            if step.inputs.len() < least || step.inputs.len() > most {
                bail!(
                    "step {i} ({:?}) takes {least} to {most} inputs, {} given",
                    step.op,
                    step.inputs.len()
                );
            }
            if let Some(n) = step.inputs.iter().find(|n| !known.contains(n.as_str())) {
                bail!("step {i} reads {n:?}, which is not defined before it");
            }
            if step.out == "loss" || !known.insert(step.out.as_str()) {
                bail!("step {i} defines {:?}, which is taken", step.out);
            }
        }
        for term in case.loss.iter().flatten() {
            if let Some(n) = term.names().into_iter().find(|n| !known.contains(n)) {
                bail!("the loss reads {n:?}, which is not defined");
            }
        }
        if case.optimizer.is_some() && case.loss.is_none() {
            bail!("an optimizer step needs a loss");
        }
        if case.optimizer_steps == 0 || (case.optimizer.is_none() && case.optimizer_steps != 1) {
            bail!(
                "optimizer_steps is {}: at least 1, and 1 without an optimizer",
                case.optimizer_steps
            );
        }
        let leaf = |n: &str| self.input(n).is_some_and(|i| i.requires_grad);
        for q in &case.compare {
            let ok = match Quantity::parse(q)? {
                Quantity::Loss => case.loss.is_some(),
                Quantity::Value(n) => known.contains(n.as_str()),
                Quantity::Grad(n) => leaf(&n) && case.loss.is_some(),
                Quantity::AfterStep(n) => leaf(&n) && case.optimizer.is_some(),
                Quantity::State(n, slot) => {
                    leaf(&n)
                        && match (&case.optimizer, slot) {
                            (
                                Some(ProbeOptimizer::Sgd { momentum, .. }),
                                StateSlot::MomentumBuffer,
                            ) => *momentum != 0.0,
                            (
                                Some(ProbeOptimizer::Adam { .. } | ProbeOptimizer::Adamw { .. }),
                                StateSlot::ExpAvg | StateSlot::ExpAvgSq,
                            ) => true,
                            _ => false,
                        }
                }
            };
            if !ok {
                bail!("quantity {q:?} does not exist in this case");
            }
        }
        Ok(())
    }
}

/// Runs `f`, catching a panic inside the framework it calls: `Err` holds the panic's message
/// on one line, prefixed `panic: ` (a probe case that panics is a framework error, an
/// outcome of the probe, not a crash of the runner).
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        format!(
            "panic: {}",
            msg.split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "probe": "p", "dtype": "f32", "device": "cpu",
            "inputs": [
                {"name": "x", "dtype": "float", "shape": [1, 1, 3], "values": [0.0, 1.0, 2.0], "requires_grad": false},
                {"name": "w", "dtype": "float", "shape": [1, 1, 2], "values": [1.0, -1.0], "requires_grad": true}
            ],
            "cases": [{
                "name": "a",
                "steps": [{"out": "y", "inputs": ["x", "w"],
                           "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1}}],
                "loss": [{"kind": "sum", "input": "y"}],
                "optimizer": null,
                "optimizer_steps": 1,
                "compare": ["loss", "y", "w.grad"]
            }]
        })
    }

    #[test]
    fn parses_a_normalized_probe() {
        let spec = ProbeSpec::from_json(&base().to_string()).unwrap();
        assert_eq!(spec.cases[0].steps[0].op.arity(), (2, 2));
        assert!(matches!(
            spec.cases[0].steps[0].op,
            Op::Conv1d { stride: 1, .. }
        ));
        assert_eq!(
            Quantity::parse("w.grad").unwrap(),
            Quantity::Grad("w".into())
        );
    }

    #[test]
    fn op_names_are_the_schema_names() {
        for (json, want) in [
            (r#"{"name": "broadcast_to", "shape": [2]}"#, "BroadcastTo"),
            (
                r#"{"name": "upsample_nearest1d", "size": 4}"#,
                "UpsampleNearest1d",
            ),
            (
                r#"{"name": "upsample_nearest2d", "size": [4, 4]}"#,
                "UpsampleNearest2d",
            ),
            (r#"{"name": "bce_with_logits"}"#, "BceWithLogits"),
            (
                r#"{"name": "layer_norm", "eps": 1e-5, "candle": "slow"}"#,
                "LayerNorm",
            ),
        ] {
            let op: Op = serde_json::from_str(json).unwrap();
            assert!(format!("{op:?}").starts_with(want), "{json} → {op:?}");
        }
    }

    #[test]
    fn signed_dimensions_count_from_the_end() {
        assert_eq!(dim_index(-1, 3), Some(2));
        assert_eq!(dim_index(-3, 3), Some(0));
        assert_eq!(dim_index(2, 3), Some(2));
        assert_eq!(dim_index(3, 3), None);
        assert_eq!(dim_index(-4, 3), None);
        assert_eq!(dim_index(0, 0), None);
    }

    #[test]
    fn statuses_are_the_python_names() {
        let m = result_meta("p", "c", "w.grad", Status::Unsupported, "why");
        assert_eq!(m["probe"], "p");
        assert_eq!(m["kind"], "result");
        assert_eq!(m["status"], "unsupported");
        assert_eq!(m["message"], "why");
        let names: Vec<_> = [
            Status::Ok,
            Status::MissingGradient,
            Status::FrameworkError,
            Status::Unsupported,
        ]
        .map(Status::name)
        .to_vec();
        assert_eq!(
            names,
            ["ok", "missing-gradient", "framework-error", "unsupported"]
        );
    }

    #[test]
    fn unknown_argument_is_refused() {
        let mut v = base();
        v["cases"][0]["steps"][0]["op"]["paddin"] = serde_json::json!(1);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("paddin"), "{err:#}");
    }

    #[test]
    fn undefined_names_and_quantities_are_refused() {
        let mut v = base();
        v["cases"][0]["steps"][0]["inputs"] = serde_json::json!(["x", "k"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("\"k\""), "{err:#}");

        let mut v = base();
        v["cases"][0]["compare"] = serde_json::json!(["x.grad"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("x.grad"), "{err:#}");
    }

    #[test]
    fn non_finite_values_are_strings() {
        let mut v = base();
        v["inputs"][0]["values"] = serde_json::json!(["-inf", 1.0, "nan"]);
        let spec = ProbeSpec::from_json(&v.to_string()).unwrap();
        let x = &spec.inputs[0].values;
        assert_eq!(x[0], f64::NEG_INFINITY);
        assert!(x[2].is_nan());
        v["inputs"][0]["values"] = serde_json::json!(["-infinity", 1.0, 2.0]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("-infinity"), "{err:#}");
    }

    #[test]
    fn int64_inputs_hold_integers_without_gradient() {
        let mut v = base();
        v["inputs"][0]["dtype"] = serde_json::json!("int64");
        ProbeSpec::from_json(&v.to_string()).unwrap();
        v["inputs"][0]["values"] = serde_json::json!([0.0, 1.5, 2.0]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("1.5"), "{err:#}");
        let mut v = base();
        v["inputs"][1]["dtype"] = serde_json::json!("int64");
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("no gradient"), "{err:#}");
    }

    #[test]
    fn optimizer_state_quantities_follow_the_optimizer() {
        let mut v = base();
        v["cases"][0]["optimizer"] = serde_json::json!({"name": "sgd", "lr": 0.1,
            "momentum": 0.9, "dampening": 0.0, "nesterov": false, "weight_decay": 0.0});
        v["cases"][0]["optimizer_steps"] = serde_json::json!(3);
        v["cases"][0]["compare"] = serde_json::json!(["w.after_step", "w.momentum_buffer"]);
        let spec = ProbeSpec::from_json(&v.to_string()).unwrap();
        assert_eq!(
            spec.cases[0].quantities().unwrap()[1],
            Quantity::State("w".into(), StateSlot::MomentumBuffer)
        );
        v["cases"][0]["compare"] = serde_json::json!(["w.exp_avg"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("w.exp_avg"), "{err:#}");
        v["cases"][0]["optimizer"] = serde_json::Value::Null;
        v["cases"][0]["compare"] = serde_json::json!(["y"]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("optimizer_steps"), "{err:#}");
    }

    #[test]
    fn a_batch_names_the_probe_that_cannot_run() {
        let good = base();
        let mut bad = base();
        bad["probe"] = serde_json::json!("broken");
        bad["cases"][0]["compare"] = serde_json::json!(["x.grad"]);
        let text = serde_json::json!({"probes": [good, bad]}).to_string();
        let err = ProbeBatch::from_json(&text).unwrap_err();
        assert!(format!("{err:#}").contains("\"broken\""), "{err:#}");
        let text = serde_json::json!({"probes": [base(), base()]}).to_string();
        assert_eq!(ProbeBatch::from_json(&text).unwrap().probes.len(), 2);
    }

    #[test]
    fn new_op_names_parse_with_their_arguments() {
        for (json, want) in [
            (
                r#"{"name": "conv_transpose2d", "padding": [0, 1], "output_padding": [0, 0], "stride": [2, 1], "dilation": [1, 1], "groups": 1}"#,
                "ConvTranspose2d",
            ),
            (
                r#"{"name": "max_pool2d", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]}"#,
                "MaxPool2d",
            ),
            (r#"{"name": "sum", "dims": null, "keepdim": false}"#, "Sum"),
            (
                r#"{"name": "max", "dims": [0, -1], "keepdim": true}"#,
                "Max",
            ),
            (r#"{"name": "gelu", "approximate": "tanh"}"#, "Gelu"),
            (
                r#"{"name": "cross_entropy", "reduction": "none"}"#,
                "CrossEntropy",
            ),
            (r#"{"name": "embedding"}"#, "Embedding"),
        ] {
            let op: Op = serde_json::from_str(json).unwrap();
            assert!(format!("{op:?}").starts_with(want), "{json} → {op:?}");
        }
        let op: Op =
            serde_json::from_str(r#"{"name": "argsort", "dim": -1, "descending": true}"#).unwrap();
        assert!(op.integer_output());
        let op: Op = serde_json::from_str(r#"{"name": "embedding"}"#).unwrap();
        assert_eq!(op.integer_inputs(), &[0]);
    }

    #[test]
    fn values_must_fill_the_shape() {
        let mut v = base();
        v["inputs"][0]["values"] = serde_json::json!([0.0, 1.0]);
        let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains("holds 3 values"), "{err:#}");
    }

    /// The workflow writes Python's shortest round-trip decimals (`repr`); they must parse to
    /// the same binary64 value, or inputs such as 0.1·i would differ between the frameworks
    /// by an ulp. Rust's `str::parse` is exact; serde_json needs its `float_roundtrip`.
    #[test]
    fn floats_round_trip_exactly() {
        for i in 0..20_000u32 {
            let x = f64::from(i) * 0.1 + 1e-3 * f64::from(i % 7);
            let text = format!("{x:?}");
            let parsed: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(parsed.to_bits(), x.to_bits(), "{text}");
        }
    }

    #[test]
    fn a_panic_is_caught_as_one_line() {
        assert_eq!(catch_panic(|| 3), Ok(3));
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let caught = catch_panic(|| -> u8 { panic!("shape mismatch\n  lhs [2, 3]") });
        std::panic::set_hook(hook);
        assert_eq!(caught, Err("panic: shape mismatch lhs [2, 3]".to_string()));
    }
}
