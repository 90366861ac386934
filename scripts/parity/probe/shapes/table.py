"""Shapes and kinds of a probe's tensors, inferred before anything runs.

Every op of ``schemas/probe.schema.yaml`` has one short, documented public function in the
module of its family (``shapes.layout``, ``shapes.conv``, ``shapes.dense``,
``shapes.index``), gathered here in one table (:data:`OPS`, run through :func:`infer`)
that the loader, the size limits and the layout fuzzer share. Each goes from its input
shapes and kinds and its *normalized* arguments (``normalize``'s form: every argument
explicit, pairs as ``[h, w]``, reductions' ``dims`` a list or None) to its output shape and
kind, following PyTorch 2.15's rules (convolution, transposed-convolution and pooling
output sizes, dimension ranges, narrow bounds, ``expand``'s rules for ``broadcast_to``,
element counts for ``reshape``, index and target kinds), with the project's stricter rules
where the contract has them: element-wise ops, ``weighted_sum`` and ``mse`` take equal
shapes and ``matmul`` equal batch dimensions (no implicit broadcasting), and an ``int64``
tensor feeds only layout changes and the index inputs of ``embedding``, ``index_select``,
``gather``, ``cross_entropy`` and ``nll``.

:func:`infer_case` runs a whole normalized case: the shape and kind of every quantity it
compares (``loss`` → ``[]``; ``<input>.grad``, ``.after_step`` and optimizer state → the
input's shape; every quantity stacked to ``[n, ...]`` when ``optimizer_steps`` n > 1).

Kinds are ``"float"`` (the run's dtype) and ``"int64"``. A problem is a ``ShapeError``
(one op) or a ``CaseShapeError`` (which names the step or loss term), both
``shapes.common``'s. Pure Python; the layout fuzzer builds valid cases with :func:`infer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from parity.probe.shapes.common import FLOAT, INT64, CaseShapeError, Shape, ShapeError
from parity.probe.shapes.conv import (
    avg_pool1d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose1d,
    conv_transpose2d,
    max_pool1d,
    max_pool2d,
    pad,
    upsample_nearest1d,
    upsample_nearest2d,
)
from parity.probe.shapes.dense import (
    argextremum,
    elementwise2,
    layer_norm,
    linear,
    matmul,
    reduce,
    reduce_extremum,
    rms_norm,
    softmax,
    sort,
)
from parity.probe.shapes.index import (
    bce_with_logits,
    cross_entropy,
    embedding,
    gather,
    index_add,
    index_put,
    index_select,
    mse,
    nll,
    scatter,
)
from parity.probe.shapes.layout import (
    broadcast_to,
    narrow,
    reshape,
    same_shape,
    squeeze,
    transpose,
    unsqueeze,
)

#: op name → f(args, shapes, values) → output shape.
OPS: dict[str, Callable[..., Shape]] = {
    "transpose": transpose,
    "narrow": narrow,
    "broadcast_to": broadcast_to,
    "unsqueeze": unsqueeze,
    "squeeze": squeeze,
    "reshape": reshape,
    "contiguous": same_shape,
    "conv1d": conv1d,
    "conv2d": conv2d,
    "conv_transpose1d": conv_transpose1d,
    "conv_transpose2d": conv_transpose2d,
    "max_pool1d": max_pool1d,
    "max_pool2d": max_pool2d,
    "avg_pool1d": avg_pool1d,
    "avg_pool2d": avg_pool2d,
    "pad": pad,
    "linear": linear,
    "matmul": matmul,
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
    "softmax": softmax,
    "log_softmax": softmax,
    "upsample_nearest1d": upsample_nearest1d,
    "upsample_nearest2d": upsample_nearest2d,
    **dict.fromkeys(
        ["relu", "abs", "sigmoid", "tanh", "silu", "gelu", "elu", "exp", "log", "sqrt"],
        same_shape,
    ),
    **dict.fromkeys(["add", "sub", "mul", "div", "maximum", "minimum"], elementwise2),
    "sum": reduce,
    "mean": reduce,
    "max": reduce_extremum,
    "min": reduce_extremum,
    "argmax": argextremum,
    "argmin": argextremum,
    "sort": sort,
    "argsort": sort,
    "embedding": embedding,
    "index_select": index_select,
    "gather": gather,
    "scatter_add": scatter,
    "scatter": scatter,
    "index_add": index_add,
    "index_put": index_put,
    "bce_with_logits": bce_with_logits,
    "cross_entropy": cross_entropy,
    "nll": nll,
    "mse": mse,
}

#: (least, most) input tensors per op; every other op takes one.
ARITY: dict[str, tuple[int, int]] = {
    **dict.fromkeys(["linear", "conv_transpose1d", "conv_transpose2d"], (2, 3)),
    **dict.fromkeys(["layer_norm", "scatter_add", "scatter", "index_add", "index_put"], (3, 3)),
    **dict.fromkeys(
        [
            "conv1d", "conv2d", "matmul", "add",
            "sub", "mul", "div", "maximum", "minimum", "rms_norm", "embedding",
            "index_select", "gather", "bce_with_logits", "cross_entropy", "nll", "mse",
        ],
        (2, 2),
    ),
}  # fmt: skip
#: Ops whose output is int64 (indices).
INTEGER_OUTPUT = frozenset({"argmax", "argmin", "argsort"})
#: The input positions that must be int64 (indices, class targets).
INTEGER_INPUTS: dict[str, tuple[int, ...]] = {
    "embedding": (0,),
    "index_select": (1,),
    "gather": (1,),
    **dict.fromkeys(["scatter_add", "scatter", "index_add", "index_put"], (1,)),
    "cross_entropy": (1,),
    "nll": (1,),
}
#: Layout changes: they take a tensor of either kind and keep its kind.
LAYOUT_OPS = frozenset(
    {"transpose", "narrow", "broadcast_to", "unsqueeze", "squeeze", "reshape", "contiguous"}
)


def arity(op: str) -> tuple[int, int]:
    """(least, most) input tensors ``op`` takes."""
    return ARITY.get(op, (1, 1))


def infer(
    op: str,
    args: Mapping[str, Any],
    shapes: Sequence[Sequence[int]],
    kinds: Sequence[str] | None = None,
    values: Sequence[Sequence[float] | None] | None = None,
) -> tuple[Shape, str]:
    """The output (shape, kind) of ``op`` with normalized ``args`` on inputs of ``shapes``
    and ``kinds`` (``"float"``/``"int64"``; None: not checked, every input taken as fitting).

    ``values`` may give, per input, its flat values when known (a probe input), so that
    index and target values are range-checked too. Raises :class:`ShapeError` (an unknown op,
    a wrong number of inputs, an int64 tensor where a float one is needed or the converse,
    shapes or arguments PyTorch refuses, or the project's stricter equal-shape rules).
    """
    fn = OPS.get(op)
    if fn is None:
        raise ShapeError(f"unknown op {op!r}")
    least, most = arity(op)
    if not least <= len(shapes) <= most:
        want = str(least) if least == most else f"{least} or {most}"
        raise ShapeError(f"{op} takes {want} inputs, {len(shapes)} given")
    shapes = [list(s) for s in shapes]
    if kinds is not None:
        if op not in LAYOUT_OPS:
            ints = INTEGER_INPUTS.get(op, ())
            for i, kind in enumerate(kinds):
                want = INT64 if i in ints else FLOAT
                if kind != want:
                    raise ShapeError(
                        f"input {i} of {op} must be {want}, got {kind}"
                        + (
                            " (int64 tensors feed only layout changes and index inputs)"
                            if kind == INT64
                            else " (indices and class targets are int64 inputs)"
                        )
                    )
        kind = INT64 if op in INTEGER_OUTPUT else (kinds[0] if op in LAYOUT_OPS else FLOAT)
    else:
        kind = INT64 if op in INTEGER_OUTPUT else FLOAT
    return fn(args, shapes, values), kind


def scratch_elements(op: str, args: Mapping[str, Any], shapes: Sequence[Sequence[int]]) -> int:
    """Elements of the largest intermediate a straightforward implementation allocates:
    the im2col buffer of a (transposed) convolution, else 0. Shapes must have passed
    :func:`infer`."""
    if op in ("conv1d", "conv2d"):
        out = infer(op, args, shapes)[0]
        w = shapes[1]
        return out[0] * math.prod(out[2:]) * w[1] * math.prod(w[2:])
    if op in ("conv_transpose1d", "conv_transpose2d"):
        x, w = shapes[:2]
        return x[0] * math.prod(x[2:]) * w[1] * math.prod(w[2:])
    return 0


# ----- cases ------------------------------------------------------------------------------


def stacked(shape: Sequence[int], steps: int) -> Shape:
    """A quantity's shape with ``steps`` optimizer iterations: ``[steps, *shape]`` when
    steps > 1, else ``shape``."""
    return [steps, *shape] if steps > 1 else list(shape)


def tensor_shapes(
    inputs: Sequence[Mapping[str, Any]], case: Mapping[str, Any]
) -> dict[str, tuple[Shape, str]]:
    """(shape, kind) of every named tensor of a normalized case: its inputs (``name``,
    ``shape``, ``dtype``, optional ``values``) and each step's ``out``, in order.

    Raises :class:`CaseShapeError` naming the step (``steps[i].op``) whose inputs or
    arguments do not fit, or a loss term (``loss[i].kind``) that cannot be computed (an
    undefined name, an int64 tensor, unequal weighted_sum shapes).
    """
    known: dict[str, tuple[Shape, str]] = {
        i["name"]: (list(i["shape"]), i.get("dtype", FLOAT)) for i in inputs
    }
    vals = {i["name"]: i.get("values") for i in inputs}
    for m in case.get("micro_batches", []):
        # row m of the stacked input at micro-step m (its values are not one tensor's)
        shape, kind = known[m["input"]]
        known[m["name"]] = (shape[1:], kind)
    for n, step in enumerate(case["steps"]):
        op = step["op"]["name"]
        args = {k: v for k, v in step["op"].items() if k != "name"}
        field = f"steps[{n}].{op}"
        missing = [x for x in step["inputs"] if x not in known]
        if missing:
            raise CaseShapeError(field, f"{missing[0]!r} is not defined before this step")
        try:
            out = infer(
                op,
                args,
                [known[x][0] for x in step["inputs"]],
                [known[x][1] for x in step["inputs"]],
                [vals.get(x) for x in step["inputs"]],
            )
        except ShapeError as e:
            shapes = ", ".join(str(known[x][0]) for x in step["inputs"])
            raise CaseShapeError(field, f"{e} (input shapes {shapes})") from None
        known[step["out"]] = out
    for n, term in enumerate(case.get("loss") or []):
        field = f"loss[{n}].{term['kind']}"
        names = [term["input"], *([term["weights"]] if "weights" in term else [])]
        for x in names:
            if x not in known:
                raise CaseShapeError(field, f"{x!r} is not defined")
            if known[x][1] != FLOAT:
                raise CaseShapeError(field, f"{x!r} is int64; a loss term takes float tensors")
        if len(names) == 2 and known[names[0]][0] != known[names[1]][0]:
            raise CaseShapeError(
                field,
                f"weighted_sum needs equal shapes: {known[names[0]][0]} and {known[names[1]][0]}",
            )
    return known


def infer_case(
    inputs: Sequence[Mapping[str, Any]], case: Mapping[str, Any]
) -> dict[str, tuple[Shape, str]]:
    """(shape, kind) of every quantity a normalized case compares (``case["compare"]``):
    ``loss`` → ``([], "float")``; a tensor name → its shape and kind; ``<input>.grad``,
    ``.after_step``, ``.exp_avg``, ``.exp_avg_sq``, ``.momentum_buffer`` → the input's
    shape, float. The loss and forward values are recorded per micro-step: stacked to
    ``[k, ...]`` when ``case["accumulate"]`` k > 1. Then every quantity is stacked to
    ``[n, ...]`` when ``case["optimizer_steps"]`` n > 1.

    Raises :class:`CaseShapeError` as :func:`tensor_shapes`, or for a quantity whose tensor
    does not exist (field ``compare``).
    """
    known = tensor_shapes(inputs, case)
    steps = case.get("optimizer_steps", 1)
    micro = case.get("accumulate", 1)
    out = {}
    for q in case["compare"]:
        name, _, suffix = q.partition(".")
        if q == "loss":
            shape, kind = [], FLOAT
        elif name not in known:
            raise CaseShapeError("compare", f"{q!r}: {name!r} is not defined")
        elif suffix:
            shape, kind = known[name][0], FLOAT
        else:
            shape, kind = known[name]
        if not suffix:
            shape = stacked(shape, micro)
        out[q] = (stacked(shape, steps), kind)
    return out
