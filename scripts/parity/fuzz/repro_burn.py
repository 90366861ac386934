"""The burn 0.22 reproductions of fuzz findings (``repro`` has the candle ones and what
both share): a standalone program on the backend of the finding's release (ndarray, or Flex
for a ``+flex`` entry of ``burn.versions``) with autodiff, the op written as
``rust/burn-parity/src/probe/ops.rs`` and ``reduce.rs`` call it. Ops burn lacks
(:data:`BURN_UNCOVERED`) get a note instead of the call."""

from __future__ import annotations

from parity.fuzz.campaign import Finding
from parity.fuzz.generate import Case, Input, input_name
from parity.fuzz.repro import (
    UNCOVERED,
    all_args,
    f32_lit,
    header,
    i64_lit,
    pair_text,
    reduced_dims,
    signed_dim,
)
from parity.plan import versions
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import INT64

#: Ops whose burn reproduction is not written: burn has no such op, or no contiguous copy
#: (its runner reports them ``unsupported``, so no burn finding names them).
BURN_UNCOVERED = frozenset({"nll", "contiguous"})


def burn_source(f: Finding, name: str) -> str:
    """A standalone burn 0.22 program (the finding's backend with autodiff: ndarray, or Flex
    for a ``+flex`` release) reproducing finding ``f`` with burn's own API."""
    c = f.case
    flex = versions.backend("burn", f.release or versions.pinned("burn")) == "flex"
    lines = [
        *header(name, BURN_UNCOVERED, c.op, "burn"),
        *(
            [f"// burn {versions.release(f.release)} with features [std, flex, autodiff]"]
            if flex
            else []
        ),
        "use burn::tensor::{Device, Int, Tensor, TensorData};"
        if any(i.dtype == INT64 for i in c.inputs)
        else "use burn::tensor::{Device, Tensor, TensorData};",
        "",
        "fn main() {",
        *(
            ["    let dev = Device::flex().autodiff();"]
            if flex
            else [
                "    #[allow(deprecated)] // burn 0.22 deprecates ndarray; the study measured it",
                "    let dev = Device::ndarray().autodiff();",
            ]
        ),
    ]
    for i, inp in enumerate(c.inputs):
        lines += _burn_input(i, inp)
    lines.append(f"    let y = {burn_call(c)};")
    lines.append('    println!("y = {}", y);')
    if c.op not in probe_shapes.INTEGER_OUTPUT:
        w = ", ".join(f32_lit(v) for v in c.weights)
        if c.out_shape:
            lines += [
                (
                    f"    let w = Tensor::<{len(c.out_shape)}>::from_data(TensorData::new("
                    f"vec![{w}], {list(c.out_shape)}), &dev);"
                ),
                "    let grads = (y.clone() * w).sum().backward();",
            ]
        else:
            lines.append("    let grads = y.clone().sum().backward(); // a scalar y is the loss")
        for i, inp in enumerate(c.inputs):
            if inp.grad and inp.dtype != INT64:
                n = input_name(i)
                lines.append(
                    f'    match {n}.grad(&grads) {{ Some(g) => println!("{n}.grad = {{g}}"), '
                    f'None => println!("{n}.grad: none") }}'
                )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _burn_input(i: int, inp: Input) -> list[str]:
    n = input_name(i)
    r = len(inp.stored_shape)
    if inp.dtype == INT64:
        vals = ", ".join(i64_lit(v) for v in inp.stored)
        kind, grad = f"{r}, Int", ""
    else:
        vals = ", ".join(f32_lit(v) for v in inp.stored)
        kind, grad = f"{r}", ".require_grad()" if inp.grad else ""
    leaf = (
        f"    let {n} = Tensor::<{kind}>::from_data(TensorData::new(vec![{vals}], "
        f"{list(inp.stored_shape)}), &dev){grad};"
    )
    out = [leaf]
    at = f"{n}.clone()"
    for op, a in inp.route.steps:
        if op == "transpose":
            at += f".swap_dims({a['dim0']}, {a['dim1']})"
        elif op == "narrow":
            at += f".narrow({a['dim']}, {a['start']}, {a['length']})"
        else:
            at += f".expand::<{len(a['shape'])}, _>({list(a['shape'])})"
    out.append(f"    let in{i} = {at};")
    return out


def _bias(c: Case) -> str:
    return "Some(in2)" if len(c.inputs) > 2 else "None"


def _pool_options(c: Case, spatial: int) -> str:
    a = all_args(c)
    stride = a.get("stride") if a.get("stride") is not None else a["kernel"]
    kind = "MaxPoolOptions" if c.op.startswith("max") else "AvgPoolOptions"
    opts = (
        f"burn::tensor::ops::{kind}::new({pair_text(a['kernel'], spatial)})"
        f".with_stride({pair_text(stride, spatial)})"
        f".with_padding({pair_text(a['padding'], spatial)})"
    )
    if kind == "MaxPoolOptions":
        opts += f".with_dilation({pair_text(a['dilation'], spatial)})"
    else:
        opts += f".with_count_include_pad({str(a['count_include_pad']).lower()})"
    return opts + f".with_ceil_mode({str(a['ceil_mode']).lower()})"


def burn_call(c: Case) -> str:
    """The burn expression computing ``y`` from ``in0``, ``in1``, …"""
    a, op = all_args(c), c.op
    rank = len(c.inputs[0].shape)
    out_rank = max(len(c.out_shape), 1)
    dim = signed_dim(a["dim"], rank) if isinstance(a.get("dim"), int) else None
    m = "burn::tensor::module"
    if op in BURN_UNCOVERED:
        return f"/* {op} {a}: {UNCOVERED} */ in0"
    if op == "transpose":
        return f"in0.swap_dims({signed_dim(a['dim0'], rank)}, {signed_dim(a['dim1'], rank)})"
    if op == "narrow":
        return f"in0.narrow({dim}, {a['start']}, {a['length']})"
    if op in ("broadcast_to", "reshape"):
        call = "expand" if op == "broadcast_to" else "reshape"
        return f"in0.{call}::<{len(a['shape'])}, _>({list(a['shape'])})"
    if op == "unsqueeze":
        return f"in0.unsqueeze_dim::<{rank + 1}>({signed_dim(a['dim'], rank + 1)})"
    if op == "squeeze":
        return f"in0.squeeze_dim::<{rank - 1}>({dim})"
    if op in ("conv1d", "conv2d"):
        n = 1 if op == "conv1d" else 2
        p, s, dl = (pair_text(a[k], n) for k in ("padding", "stride", "dilation"))
        return (
            f"{m}::{op}(in0, in1, None, burn::tensor::ops::ConvOptions::new({s}, {p}, {dl}, "
            f"{a['groups']}))"
        )
    if op.startswith("conv_transpose"):
        n = 1 if op.endswith("1d") else 2
        s, p, o, dl = (
            pair_text(a[k], n) for k in ("stride", "padding", "output_padding", "dilation")
        )
        return (
            f"{m}::{op}(in0, in1, {_bias(c)}, burn::tensor::ops::ConvTransposeOptions::new("
            f"{s}, {p}, {o}, {dl}, {a['groups']}))"
        )
    if op in ("max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"):
        return f"{m}::{op}(in0, {_pool_options(c, 1 if op.endswith('1d') else 2)})"
    if op == "pad":
        pairs = ", ".join(f"({b}, {e})" for b, e in a["padding"])
        return f"in0.pad(vec![{pairs}], burn::tensor::ops::PadMode::Constant(0.0))"
    if op == "linear":
        return f"{m}::linear(in0, in1.transpose(), {_bias(c)})"
    if op == "matmul":
        return "in0.matmul(in1)"
    if op in ("add", "sub", "mul", "div"):
        return f"in0.{op}(in1)"
    if op in ("maximum", "minimum"):
        return f"in0.{'max' if op == 'maximum' else 'min'}pair_text(in1)"
    if op == "layer_norm":
        return f"{m}::layer_norm(in0, in1, Some(in2), {float(a['eps'])!r})"
    if op == "rms_norm":
        return (
            "burn::nn::RmsNorm { gamma: burn::module::Param::initialized("
            f"burn::module::ParamId::new(), in1), epsilon: {float(a['eps'])!r} }}.forward(in0)"
        )
    if op in ("softmax", "log_softmax"):
        return f"burn::tensor::activation::{op}(in0, {dim})"
    if op.startswith("upsample_nearest"):
        n = op[-2]
        return (
            f"burn::nn::interpolate::Interpolate{n}dConfig::new()"
            f".with_output_size(Some({a['size']!r}))"
            ".with_mode(burn::nn::interpolate::InterpolateMode::Nearest)"
            ".with_align_corners(false).init().forward(in0)"
        )
    if op in ("relu", "sigmoid", "tanh", "silu"):
        return f"burn::tensor::activation::{op}(in0)"
    if op == "gelu":
        approx = "" if a["approximate"] == "none" else "_approximate"
        return f"burn::tensor::activation::gelu{approx}(in0)"
    if op == "elu":
        return f"burn::tensor::activation::elu(in0, {float(a['alpha'])!r})"
    if op in ("abs", "exp", "log", "sqrt"):
        return f"in0.{op}()"
    if op in ("sum", "mean", "max", "min"):
        dims = reduced_dims(c)
        if len(dims) == rank and not a["keepdim"]:
            return f"in0.{op}()"
        idx = "&vec![" + ", ".join(f"{x}usize" for x in dims) + "]"
        kept = f"in0.{op}_dims({idx})"
        return kept if a["keepdim"] else f"{kept}.squeeze_dims::<{out_rank}>({idx})"
    if op in ("argmax", "argmin"):
        call = f"in0.{op}({dim})"
        return call if a["keepdim"] or rank == 1 else f"{call}.squeeze_dim::<{rank - 1}>({dim})"
    if op in ("sort", "argsort"):
        return f"in0.{op}{'_descending' if a['descending'] else ''}({dim})"
    if op == "embedding":
        return f"{m}::embedding(in1, in0)"
    if op == "index_select":
        return f"in0.select({dim}, in1)"
    if op == "gather":
        return f"in0.gather({dim}, in1)"
    if op in ("scatter_add", "scatter", "index_add", "index_put"):
        add = op in ("scatter_add", "index_add") or a.get("accumulate")
        update = f"burn::tensor::IndexingUpdateOp::{'Add' if add else 'Assign'}"
        if op.startswith("scatter"):
            return f"in0.scatter({dim}, in1, in2, {update})"
        return f"in0.select_assign({dim if op == 'index_add' else 0}, in1, in2, {update})"
    if op == "bce_with_logits":
        return (
            "burn::nn::loss::BinaryCrossEntropyLossConfig::new().with_logits(true).init(&dev)"
            ".forward(in0, in1.int())"
        )
    if op == "cross_entropy":
        return (
            "burn::nn::loss::CrossEntropyLossConfig::new().with_logits(true).init(&dev)"
            ".forward(in0, in1)"
        )
    if op == "mse":
        if a["reduction"] == "none":
            return "burn::nn::loss::MseLoss::new().forward_no_reduction(in0, in1)"
        red = "Mean" if a["reduction"] == "mean" else "Sum"
        return f"burn::nn::loss::MseLoss::new().forward(in0, in1, burn::nn::loss::Reduction::{red})"
    raise ValueError(f"no burn reproduction for op {op!r}")
