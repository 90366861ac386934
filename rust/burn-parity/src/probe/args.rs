//! An op's inputs as its burn function takes them ([`Args`]: float or int64, of a fixed
//! rank), and the shape check of the element-wise ops and losses ([`same_shape`]). Shared by
//! [`super::ops`] and [`super::reduce`], so that neither needs the other's helpers.

use anyhow::anyhow;
use burn::tensor::Tensor;
use parity_common::probe_spec::Op;

use super::dyn_tensor::{Dyn, DynInt, Value};
use super::outcome::{framework, Fault, Step};

/// Refuses two tensors of different shapes (ranks included), as PyTorch's interpreter does:
/// probes broadcast explicitly with `broadcast_to`.
pub(crate) fn same_shape(op: &str, a: &Dyn, b: &Dyn) -> Step<()> {
    if a.dims() != b.dims() {
        return Err(framework(format!(
            "{op}: shapes {:?} and {:?} differ",
            a.dims(),
            b.dims()
        )));
    }
    Ok(())
}

/// The op's inputs, taken in order: float or int64 as the op needs.
pub(crate) struct Args {
    op: &'static str,
    values: std::vec::IntoIter<Value>,
}

impl Args {
    /// The inputs of `op`, in the order of its step's `inputs`.
    pub(crate) fn new(op: &Op, inputs: Vec<Value>) -> Self {
        Args {
            op: op_name(op),
            values: inputs.into_iter(),
        }
    }

    /// The next input, float or int64.
    pub(crate) fn next(&mut self) -> Step<Value> {
        self.values
            .next()
            .ok_or_else(|| Fault::Spec(anyhow!("{} needs more inputs", self.op)))
    }

    /// The next input, a float tensor (`role` names it in a refusal).
    pub(crate) fn float(&mut self, role: &str) -> Step<Dyn> {
        let op = self.op;
        self.next()?.float(op, role)
    }

    /// The next input as the fixed-rank float tensor burn's function takes.
    pub(crate) fn ranked<const D: usize>(&mut self, role: &str) -> Step<Tensor<D>>
    where
        Tensor<D>: super::dyn_tensor::Ranked<Src = Dyn>,
    {
        let op = self.op;
        self.float(role)?.to(op, role)
    }

    /// The next input, an int64 tensor.
    pub(crate) fn int(&mut self, role: &str) -> Step<DynInt> {
        let op = self.op;
        self.next()?.int(op, role)
    }

    /// The next input if there is one (an optional bias), a float tensor.
    pub(crate) fn optional_float(&mut self, role: &str) -> Step<Option<Dyn>> {
        match self.values.next() {
            Some(v) => Ok(Some(v.float(self.op, role)?)),
            None => Ok(None),
        }
    }

    /// The op name, for messages.
    pub(crate) fn op(&self) -> &'static str {
        self.op
    }
}

/// The probe name of an op (`conv_transpose1d`), for messages.
fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Transpose { .. } => "transpose",
        Op::Narrow { .. } => "narrow",
        Op::BroadcastTo { .. } => "broadcast_to",
        Op::Unsqueeze { .. } => "unsqueeze",
        Op::Squeeze { .. } => "squeeze",
        Op::Reshape { .. } => "reshape",
        Op::Contiguous => "contiguous",
        Op::Conv1d { .. } => "conv1d",
        Op::Conv2d { .. } => "conv2d",
        Op::ConvTranspose1d { .. } => "conv_transpose1d",
        Op::ConvTranspose2d { .. } => "conv_transpose2d",
        Op::MaxPool1d { .. } => "max_pool1d",
        Op::MaxPool2d { .. } => "max_pool2d",
        Op::AvgPool1d { .. } => "avg_pool1d",
        Op::AvgPool2d { .. } => "avg_pool2d",
        Op::Pad { .. } => "pad",
        Op::Linear => "linear",
        Op::Matmul => "matmul",
        Op::LayerNorm { .. } => "layer_norm",
        Op::RmsNorm { .. } => "rms_norm",
        Op::Softmax { .. } => "softmax",
        Op::LogSoftmax { .. } => "log_softmax",
        Op::UpsampleNearest1d { .. } => "upsample_nearest1d",
        Op::UpsampleNearest2d { .. } => "upsample_nearest2d",
        Op::Relu => "relu",
        Op::Abs => "abs",
        Op::Sigmoid => "sigmoid",
        Op::Tanh => "tanh",
        Op::Silu => "silu",
        Op::Gelu { .. } => "gelu",
        Op::Elu { .. } => "elu",
        Op::Exp => "exp",
        Op::Log => "log",
        Op::Sqrt => "sqrt",
        Op::Add => "add",
        Op::Sub => "sub",
        Op::Mul => "mul",
        Op::Div => "div",
        Op::Maximum => "maximum",
        Op::Minimum => "minimum",
        Op::Sum { .. } => "sum",
        Op::Mean { .. } => "mean",
        Op::Max { .. } => "max",
        Op::Min { .. } => "min",
        Op::Argmax { .. } => "argmax",
        Op::Argmin { .. } => "argmin",
        Op::Sort { .. } => "sort",
        Op::Argsort { .. } => "argsort",
        Op::Embedding => "embedding",
        Op::IndexSelect { .. } => "index_select",
        Op::Gather { .. } => "gather",
        Op::ScatterAdd { .. } => "scatter_add",
        Op::Scatter { .. } => "scatter",
        Op::IndexAdd { .. } => "index_add",
        Op::IndexPut { .. } => "index_put",
        Op::BceWithLogits => "bce_with_logits",
        Op::CrossEntropy { .. } => "cross_entropy",
        Op::Nll { .. } => "nll",
        Op::Mse { .. } => "mse",
    }
}
