"""Framework-native reproductions of fuzz findings: a standalone candle 0.11 program
(:func:`candle_source`) or burn 0.22 program (:func:`burn_source`, the release's backend
with autodiff) per finding, written by ``parity.fuzz.job`` next to its probe file, ready to
paste into an upstream issue. Each builds the stored leaves, applies the layout route of
each input, the op with the framework's own API (the call its probe runner makes:
``rust/candle-parity/src/probe/ops.rs``, ``rust/burn-parity/src/probe/ops.rs`` and
``reduce.rs``), the loss ``weighted_sum(y, w)``, and prints ``y`` and the gradients.

Every op of the probe language is written except the ones in :data:`CANDLE_UNCOVERED` and
``repro_burn.BURN_UNCOVERED`` (ops the framework's API lacks, which the runners report as
``unsupported`` and so never give a finding); for those the program says so at its top
and in place of the call (``tests/test_fuzz_repro.py`` holds both). The programs are
source text: the workflow does not compile them. The burn writer is ``repro_burn``.
"""

from __future__ import annotations

from collections.abc import Sequence

from parity.fuzz.campaign import Finding
from parity.fuzz.generate import Case, Input, input_name
from parity.probe import ops as probe_ops
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import INT64

#: Ops whose candle reproduction is not written: candle has no such op (its runner reports
#: them ``unsupported``, so no candle finding names them).
CANDLE_UNCOVERED = frozenset({"max_pool1d", "avg_pool1d"})
UNCOVERED = "not written for this op: its API has none (the runner reports it unsupported)"


def f32_lit(v: float) -> str:
    """A Rust f32 literal (``1.5f32``)."""
    return f"{float(v)!r}f32"


def i64_lit(v: float) -> str:
    """A Rust i64 literal of an integral value (``3i64``)."""
    return f"{int(v)}i64"


def _tuple(v: Sequence[int]) -> str:
    return repr(tuple(int(n) for n in v)) if len(v) != 1 else f"({int(v[0])},)"


def signed_dim(d: int, rank: int) -> int:
    """A signed dimension as an index (PyTorch's rule; a scalar takes 0)."""
    return d % max(rank, 1)


def _first(v) -> int:
    """The one value candle takes for both axes of a pair argument."""
    return int(v[0]) if isinstance(v, list) else int(v)


def pair_text(v, n: int) -> str:
    """A per-axis argument as a Rust array of ``n`` values (``[2, 2]`` from 2)."""
    return "[" + ", ".join(str(x) for x in (v if isinstance(v, list) else [v] * n)) + "]"


def all_args(c: Case) -> dict:
    """The case's YAML arguments over the op's schema defaults."""
    return {**probe_ops.op_defaults(c.op), **c.args}


def reduced_dims(c: Case) -> list[int]:
    """The dimensions a reduction case reduces, as indices (every one for none given)."""
    rank = len(c.inputs[0].shape)
    dims = probe_ops.op_args(c.op, c.args)["dims"]
    return list(range(rank)) if dims is None else [signed_dim(d, rank) for d in dims]


def header(name: str, uncovered: frozenset, op: str, framework: str) -> list[str]:
    """The program's first comment lines: its name, and a note when ``op`` is in
    ``uncovered``."""
    lines = [f"// {name}"]
    if op in uncovered:
        lines.append(f"// NOTE: the {framework} call of {op} is {UNCOVERED}; see the probe file.")
    return lines


# ----- candle -----------------------------------------------------------------------------


def candle_source(f: Finding, name: str) -> str:
    """A standalone candle 0.11 program reproducing finding ``f`` (candle's own API)."""
    c = f.case
    lines = [
        *header(name, CANDLE_UNCOVERED, c.op, "candle"),
        "use candle_core::{Device, Module, Tensor, Var};"
        if ".forward(" in candle_call(c)
        else "use candle_core::{Device, Tensor, Var};",
        "",
        "fn main() -> candle_core::Result<()> {",
        "    let dev = Device::Cpu;",
    ]
    for i, inp in enumerate(c.inputs):
        lines += _candle_input(i, inp)
    lines.append(f"    let y = {candle_call(c)};")
    lines += _candle_tail(c)
    return "\n".join(lines) + "\n"


def _candle_input(i: int, inp: Input) -> list[str]:
    n = input_name(i)
    shape = _tuple(inp.stored_shape)
    if inp.dtype == INT64:
        vals = ", ".join(i64_lit(v) for v in inp.stored)
        out = [f"    let {n} = Tensor::from_vec(vec![{vals}], {shape}, &dev)?;"]
        at = f"{n}.clone()"
    elif inp.grad:
        vals = ", ".join(f32_lit(v) for v in inp.stored)
        out = [f"    let {n} = Var::from_vec(vec![{vals}], {shape}, &dev)?;"]
        at = f"{n}.as_tensor().clone()"
    else:
        vals = ", ".join(f32_lit(v) for v in inp.stored)
        out = [f"    let {n} = Tensor::from_vec(vec![{vals}], {shape}, &dev)?;"]
        at = f"{n}.clone()"
    for op, a in inp.route.steps:
        call = {
            "transpose": f"transpose({a.get('dim0')}, {a.get('dim1')})",
            "narrow": f"narrow({a.get('dim')}, {a.get('start')}, {a.get('length')})",
            "broadcast_to": f"broadcast_as({_tuple(a.get('shape', ()))})",
        }[op]
        at = f"{at}.{call}?"
    out.append(f"    let in{i} = {at};")
    return out


def _candle_tail(c: Case) -> list[str]:
    lines = ['    println!("y = {}", y.flatten_all()?);']
    if c.op in probe_shapes.INTEGER_OUTPUT:
        return [*lines, "    Ok(())", "}"]
    w = ", ".join(f32_lit(v) for v in c.weights)
    if c.out_shape:
        lines += [
            f"    let w = Tensor::from_vec(vec![{w}], {_tuple(c.out_shape)}, &dev)?;",
            "    let loss = (&y * &w)?.sum_all()?;",
        ]
    else:
        lines.append("    let loss = y.sum_all()?; // a scalar y is the loss")
    lines.append("    let grads = loss.backward()?;")
    for i, inp in enumerate(c.inputs):
        if inp.grad and inp.dtype != INT64:
            n = input_name(i)
            lines.append(
                f'    match grads.get({n}.as_tensor()) {{ Some(g) => println!("{n}.grad = {{}}", '
                f'g.flatten_all()?), None => println!("{n}.grad: none") }}'
            )
    return [*lines, "    Ok(())", "}"]


def _candle_bias(c: Case) -> str:
    return "Some(in2.clone())" if len(c.inputs) > 2 else "None"


def candle_call(c: Case) -> str:
    """The candle expression (with its ``?``) computing ``y`` from ``in0``, ``in1``, …"""
    a, op = all_args(c), c.op
    rank = len(c.inputs[0].shape)
    dim = signed_dim(a["dim"], rank) if isinstance(a.get("dim"), int) else None
    if op in CANDLE_UNCOVERED:
        return f"/* {op} {a}: {UNCOVERED} */ in0.clone()"
    if op in ("transpose",):
        return f"in0.transpose({signed_dim(a['dim0'], rank)}, {signed_dim(a['dim1'], rank)})?"
    if op == "narrow":
        return f"in0.narrow({dim}, {a['start']}, {a['length']})?"
    if op == "broadcast_to":
        return f"in0.broadcast_as({_tuple(a['shape'])})?"
    if op == "unsqueeze":
        return f"in0.unsqueeze({signed_dim(a['dim'], rank + 1)})?"
    if op == "squeeze":
        return f"in0.squeeze({dim})?"
    if op == "reshape":
        return f"in0.reshape({_tuple(a['shape'])})?"
    if op in ("conv1d", "conv2d"):
        p, s, dl = (_first(a[k]) for k in ("padding", "stride", "dilation"))
        return f"in0.{op}(&in1, {p}, {s}, {dl}, {a['groups']})?"
    if op.startswith("conv_transpose"):
        fields = ["padding", "output_padding", "stride", "dilation"]
        fields += ["groups"] if op.endswith("1d") else []
        cfg = ", ".join(f"{k}: {_first(a[k])}" for k in fields)
        kind = "ConvTranspose1d" if op.endswith("1d") else "ConvTranspose2d"
        return (
            f"candle_nn::{kind}::new(in1.clone(), {_candle_bias(c)}, "
            f"candle_nn::{kind}Config {{ {cfg} }}).forward(&in0)?"
        )
    if op in ("max_pool2d", "avg_pool2d"):
        k, s = (
            pair_text(a[x] if a.get(x) is not None else a["kernel"], 2)
            for x in ("kernel", "stride")
        )
        return f"in0.{op}_with_stride(({k[1:-1]}), ({s[1:-1]}))?"
    if op == "pad":
        lead = rank - len(a["padding"])
        steps = "".join(
            f".pad_with_zeros({lead + j}, {b}, {e})?" for j, (b, e) in enumerate(a["padding"])
        )
        return f"in0{steps}"
    if op == "linear":
        return f"candle_nn::Linear::new(in1.clone(), {_candle_bias(c)}).forward(&in0)?"
    if op in ("matmul", "add", "sub", "mul", "div", "maximum", "minimum"):
        return f"in0.{op}(&in1)?"
    if op in ("layer_norm", "rms_norm"):
        slow = "_slow" if a["candle"] == "slow" else ""
        more = "&in2, " if op == "layer_norm" else ""
        return f"candle_nn::ops::{op}{slow}(&in0, &in1, {more}{float(a['eps'])!r}f32)?"
    if op == "softmax":
        if a["candle"] == "fused":
            return "candle_nn::ops::softmax_last_dim(&in0)?"
        return f"candle_nn::ops::softmax(&in0, {dim})?"
    if op == "log_softmax":
        return f"candle_nn::ops::log_softmax(&in0, {dim})?"
    if op == "upsample_nearest1d":
        return f"in0.upsample_nearest1d({a['size']})?"
    if op == "upsample_nearest2d":
        return f"in0.upsample_nearest2d({a['size'][0]}, {a['size'][1]})?"
    if op in ("relu", "abs", "tanh", "exp", "silu", "log", "sqrt", "contiguous"):
        return f"in0.{op}()?"
    if op == "sigmoid":
        return "candle_nn::ops::sigmoid(&in0)?"
    if op == "gelu":
        return "in0.gelu_erf()?" if a["approximate"] == "none" else "in0.gelu()?"
    if op == "elu":
        return f"in0.elu({float(a['alpha'])!r})?"
    if op in ("sum", "mean"):
        dims = "vec![" + ", ".join(f"{x}usize" for x in reduced_dims(c)) + "]"
        return f"in0.{op}{'_keepdim' if a['keepdim'] else ''}({dims})?"
    if op in ("max", "min"):
        dims = reduced_dims(c)
        if len(dims) == 1 and not a["keepdim"]:
            return f"in0.{op}({dims[0]})?"
        chain = "".join(f".{op}_keepdim({x})?" for x in dims)
        if a["keepdim"]:
            return f"in0{chain}"
        return f"in0{chain}.reshape({_tuple(c.out_shape)})?"
    if op in ("argmax", "argmin"):
        return f"in0.{op}{'_keepdim' if a['keepdim'] else ''}({dim})?"
    if op == "sort":
        return f"in0.sort_last_dim({str(not a['descending']).lower()})?.0"
    if op == "argsort":
        return f"in0.arg_sort_last_dim({str(not a['descending']).lower()})?"
    if op == "embedding":
        return f"candle_nn::Embedding::new(in1.clone(), {c.inputs[1].shape[1]}).forward(&in0)?"
    if op in ("index_select", "gather"):
        return f"in0.{op}(&in1, {dim})?"
    if op in ("scatter_add", "scatter", "index_add"):
        return f"in0.{op}(&in1, &in2, {dim})?"
    if op == "index_put":
        return "in0.index_add(&in1, &in2, 0)?"
    if op == "bce_with_logits":
        return "candle_nn::loss::binary_cross_entropy_with_logit(&in0, &in1)?"
    if op in ("cross_entropy", "nll", "mse"):
        return f"candle_nn::loss::{op}(&in0, &in1)?"
    raise ValueError(f"no candle reproduction for op {op!r}")
