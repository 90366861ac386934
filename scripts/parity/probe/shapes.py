"""Shapes and kinds of a probe's tensors, inferred before anything runs.

Over 500 lines: one short, documented rule per op of the probe language (about fifty), in
one table the loader and the layout fuzzer share.

Every op of ``schemas/probe.schema.yaml`` has one public function here (:data:`OPS`, run
through :func:`infer`) from its input shapes and kinds and its *normalized* arguments
(``probes.py``'s form: every argument explicit, pairs as ``[h, w]``, reductions'
``dims`` a list or None) to its output shape and kind, following PyTorch 2.15's rules
(convolution, transposed-convolution and pooling output sizes, dimension ranges, narrow
bounds, ``expand``'s rules for ``broadcast_to``, element counts for ``reshape``, index and
target kinds), with the project's stricter rules where the contract has them: element-wise
ops, ``weighted_sum`` and ``mse`` take equal shapes and ``matmul`` equal batch dimensions
(no implicit broadcasting), and an ``int64`` tensor feeds only layout changes and the index
inputs of ``embedding``, ``index_select``, ``gather``, ``cross_entropy`` and ``nll``.

:func:`infer_case` runs a whole normalized case: the shape and kind of every quantity it
compares (``loss`` → ``[]``; ``<input>.grad``, ``.after_step`` and optimizer state → the
input's shape; every quantity stacked to ``[n, ...]`` when ``optimizer_steps`` n > 1).

Kinds are ``"float"`` (the run's dtype) and ``"int64"``. A problem is a :class:`ShapeError`
(one op) or a :class:`CaseShapeError` (which names the step or loss term). Pure Python; the
layout fuzzer builds valid cases with :func:`infer`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

FLOAT, INT64 = "float", "int64"
KINDS = (FLOAT, INT64)

Shape = list[int]


class ShapeError(ValueError):
    """The inputs or arguments of one op do not fit; the message says why, in PyTorch's
    terms."""


class CaseShapeError(ValueError):
    """A case whose steps or loss do not fit: ``field`` is relative to the case
    (``steps[2].conv1d``, ``loss[0].weighted_sum``), ``problem`` the reason."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# ----- helpers ---------------------------------------------------------------------------


def dim_index(d: int, rank: int, what: str = "dim") -> int:
    """A signed dimension as an index below ``rank`` (a scalar takes −1 and 0, as in
    PyTorch). Raises :class:`ShapeError` when it is out of range."""
    r = max(rank, 1)
    if not -r <= d < r:
        raise ShapeError(
            f"{what} {d} is out of range for a tensor of rank {rank} (expected {-r} … {r - 1})"
        )
    return d + r if d < 0 else d


def _rank(shape: Shape, want: int, what: str) -> None:
    if len(shape) != want:
        raise ShapeError(f"{what} must have rank {want}, got shape {list(shape)}")


def _equal(op: str, a: Shape, b: Shape, what: str = "shapes") -> None:
    if list(a) != list(b):
        raise ShapeError(
            f"{op} needs equal {what} (no implicit broadcasting; use broadcast_to): "
            f"{list(a)} and {list(b)}"
        )


def _conv_size(size: int, k: int, pad: int, stride: int, dil: int, axis: str) -> int:
    span = dil * (k - 1) + 1
    if size + 2 * pad < span:
        raise ShapeError(
            f"the padded input ({size} + 2·{pad} along {axis}) is smaller than the dilated "
            f"kernel ({span})"
        )
    return (size + 2 * pad - span) // stride + 1


def _conv(op: str, spatial: int, args: Mapping, shapes: Sequence[Shape]) -> Shape:
    x, w = shapes
    _rank(x, 2 + spatial, f"{op}'s input [b, c_in, {'l' if spatial == 1 else 'h, w'}]")
    _rank(w, 2 + spatial, f"{op}'s kernel [c_out, c_in/groups, k...]")
    g = args["groups"]
    if x[1] % g or w[0] % g:
        raise ShapeError(
            f"groups {g} must divide the input channels ({x[1]}) and output channels ({w[0]})"
        )
    if w[1] * g != x[1]:
        raise ShapeError(
            f"the kernel takes {w[1]}·{g} (groups) = {w[1] * g} input channels, the input has "
            f"{x[1]}"
        )
    pair = _pairs(args, spatial)
    sizes = [
        _conv_size(x[2 + i], w[2 + i], pair["padding"][i], pair["stride"][i], pair["dilation"][i],
                   _axis(spatial, i))
        for i in range(spatial)
    ]  # fmt: skip
    return [x[0], w[0], *sizes]


def _axis(spatial: int, i: int) -> str:
    return "l" if spatial == 1 else "hw"[i]


def _pairs(args: Mapping, spatial: int) -> dict[str, list[int]]:
    """Per-axis values of the size arguments (an int for 1-D ops, [h, w] for 2-D)."""
    out = {}
    for k in ("padding", "stride", "dilation", "output_padding", "kernel"):
        if k in args:
            v = args[k]
            out[k] = [v] * spatial if isinstance(v, int) else list(v)
    return out


def _conv_transpose(op: str, spatial: int, args: Mapping, shapes: Sequence[Shape]) -> Shape:
    x, w = shapes
    _rank(x, 2 + spatial, f"{op}'s input [b, c_in, {'l' if spatial == 1 else 'h, w'}]")
    _rank(w, 2 + spatial, f"{op}'s kernel [c_in, c_out/groups, k...]")
    g = args["groups"]
    if x[1] % g:
        raise ShapeError(f"groups {g} must divide the input channels ({x[1]})")
    if w[0] != x[1]:
        raise ShapeError(
            f"the kernel's first dimension ({w[0]}) must equal the input channels ({x[1]}) "
            "(PyTorch's layout [c_in, c_out/groups, k...])"
        )
    p = _pairs(args, spatial)
    sizes = []
    for i in range(spatial):
        pad, opad = p["padding"][i], p["output_padding"][i]
        stride, dil = p["stride"][i], p["dilation"][i]
        if opad >= stride and opad >= dil:
            raise ShapeError(
                f"output_padding {opad} must be smaller than the stride ({stride}) or the "
                f"dilation ({dil})"
            )
        n = (x[2 + i] - 1) * stride - 2 * pad + dil * (w[2 + i] - 1) + opad + 1
        if n < 1:
            raise ShapeError(f"the output size along {_axis(spatial, i)} would be {n}")
        sizes.append(n)
    return [x[0], w[1] * g, *sizes]


def _pool(op: str, spatial: int, args: Mapping, shapes: Sequence[Shape]) -> Shape:
    (x,) = shapes
    _rank(x, 2 + spatial, f"{op}'s input [b, c, {'l' if spatial == 1 else 'h, w'}]")
    p = _pairs(args, spatial)
    sizes = []
    for i in range(spatial):
        k, s, pad = p["kernel"][i], p["stride"][i], p["padding"][i]
        if 2 * pad > k:
            raise ShapeError(f"padding {pad} must be at most half the kernel ({k})")
        n = (x[2 + i] + 2 * pad - k) // s + 1
        if x[2 + i] + 2 * pad < k or n < 1:
            raise ShapeError(
                f"the padded input ({x[2 + i]} + 2·{pad} along {_axis(spatial, i)}) is "
                f"smaller than the kernel ({k})"
            )
        sizes.append(n)
    return [*x[:2], *sizes]


def _reduce_dims(args: Mapping, x: Shape) -> list[int]:
    dims = args["dims"]
    if dims is None:
        return list(range(len(x)))
    out = []
    for d in dims:
        i = dim_index(d, len(x))
        if i in out:
            raise ShapeError(f"dim {i} appears more than once in {list(dims)}")
        out.append(i)
    return out


def _reduced(x: Shape, dims: list[int], keepdim: bool) -> Shape:
    if not x:
        return []
    if keepdim:
        return [1 if i in dims else n for i, n in enumerate(x)]
    return [n for i, n in enumerate(x) if i not in dims]


def _index_values(what: str, values: Sequence[float] | None, size: int) -> None:
    """Refuse index values (when known) outside 0 … size − 1."""
    if values is None:
        return
    bad = [v for v in values if not 0 <= v < size]
    if bad:
        raise ShapeError(f"{what} {bad[0]:g} is out of range: expected 0 … {size - 1}")


# ----- the ops ---------------------------------------------------------------------------
# Each: f(args, shapes, values) -> output shape. ``values`` holds, per input, its flat
# values when known (a probe input), else None. Kinds are checked by :func:`infer`.


def transpose(args, shapes, values=None) -> Shape:
    """Swap dims ``dim0`` and ``dim1``."""
    (x,) = shapes
    d0, d1 = dim_index(args["dim0"], len(x), "dim0"), dim_index(args["dim1"], len(x), "dim1")
    out = list(x)
    if out:
        out[d0], out[d1] = out[d1], out[d0]
    return out


def narrow(args, shapes, values=None) -> Shape:
    """``length`` elements of ``dim`` from ``start``; start + length ≤ the size."""
    (x,) = shapes
    if not x:
        raise ShapeError("narrow needs a tensor of rank 1 or more")
    d = dim_index(args["dim"], len(x))
    if args["start"] + args["length"] > x[d]:
        raise ShapeError(
            f"start {args['start']} + length {args['length']} exceeds the size {x[d]} of "
            f"dim {args['dim']}"
        )
    return [*x[:d], args["length"], *x[d + 1 :]]


def broadcast_to(args, shapes, values=None) -> Shape:
    """PyTorch's ``expand``: new leading dims, size-1 dims to any size, others kept."""
    (x,) = shapes
    target = list(args["shape"])
    if len(target) < len(x):
        raise ShapeError(f"cannot broadcast shape {list(x)} to the shorter shape {target}")
    for i in range(1, len(x) + 1):
        if x[-i] != 1 and x[-i] != target[-i]:
            raise ShapeError(
                f"cannot broadcast shape {list(x)} to {target}: dimension {len(x) - i} has "
                f"size {x[-i]} (only size 1 expands)"
            )
    return target


def unsqueeze(args, shapes, values=None) -> Shape:
    """A size-1 dimension at ``dim`` (−rank − 1 … rank)."""
    (x,) = shapes
    d = dim_index(args["dim"], len(x) + 1)
    return [*x[:d], 1, *x[d:]]


def squeeze(args, shapes, values=None) -> Shape:
    """Drop ``dim`` when its size is 1 (kept otherwise, as in PyTorch)."""
    (x,) = shapes
    d = dim_index(args["dim"], len(x))
    return [n for i, n in enumerate(x) if i != d or n != 1]


def reshape(args, shapes, values=None) -> Shape:
    """``shape``, with as many elements as the input."""
    (x,) = shapes
    target = list(args["shape"])
    if math.prod(target) != math.prod(x):
        raise ShapeError(
            f"cannot reshape {list(x)} ({math.prod(x)} elements) to {target} "
            f"({math.prod(target)} elements)"
        )
    return target


def same_shape(args, shapes, values=None) -> Shape:
    """The input's shape (contiguous and element-wise ops of one input)."""
    return list(shapes[0])


def conv1d(args, shapes, values=None) -> Shape:
    """``[b, c_in, l]`` by ``[c_out, c_in/groups, k]`` → ``[b, c_out, l_out]``."""
    return _conv("conv1d", 1, args, shapes)


def conv2d(args, shapes, values=None) -> Shape:
    """``[b, c_in, h, w]`` by ``[c_out, c_in/groups, kh, kw]`` → ``[b, c_out, h', w']``."""
    return _conv("conv2d", 2, args, shapes)


def conv_transpose1d(args, shapes, values=None) -> Shape:
    """``[b, c_in, l]`` by ``[c_in, c_out/groups, k]`` → ``[b, c_out, l_out]``."""
    return _conv_transpose("conv_transpose1d", 1, args, shapes)


def conv_transpose2d(args, shapes, values=None) -> Shape:
    """``[b, c_in, h, w]`` by ``[c_in, c_out/groups, kh, kw]`` → ``[b, c_out, h', w']``."""
    return _conv_transpose("conv_transpose2d", 2, args, shapes)


def max_pool1d(args, shapes, values=None) -> Shape:
    """``[b, c, l]`` → ``[b, c, (l + 2·padding − kernel) // stride + 1]``."""
    return _pool("max_pool1d", 1, args, shapes)


def max_pool2d(args, shapes, values=None) -> Shape:
    """``[b, c, h, w]`` → ``[b, c, h', w']``, each as max_pool1d's."""
    return _pool("max_pool2d", 2, args, shapes)


def avg_pool2d(args, shapes, values=None) -> Shape:
    """As :func:`max_pool2d`."""
    return _pool("avg_pool2d", 2, args, shapes)


def linear(args, shapes, values=None) -> Shape:
    """``[..., in]`` by ``[out, in]`` (+ bias ``[out]``) → ``[..., out]``."""
    x, w = shapes[0], shapes[1]
    if not x:
        raise ShapeError("linear's input must have rank 1 or more")
    _rank(w, 2, "linear's weight [out, in]")
    if w[1] != x[-1]:
        raise ShapeError(f"the weight {list(w)} takes {w[1]} features, the input has {x[-1]}")
    if len(shapes) > 2:
        _rank(shapes[2], 1, "linear's bias [out]")
        if shapes[2][0] != w[0]:
            raise ShapeError(f"the bias {list(shapes[2])} must have {w[0]} elements")
    return [*x[:-1], w[0]]


def matmul(args, shapes, values=None) -> Shape:
    """``[..., m, k]`` by ``[..., k, n]`` with equal batch dims → ``[..., m, n]``."""
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs operands of rank 2 or more, got {list(a)} and {list(b)}")
    _equal("matmul", a[:-2], b[:-2], "batch dimensions")
    if a[-1] != b[-2]:
        raise ShapeError(f"cannot multiply {list(a)} by {list(b)}: {a[-1]} ≠ {b[-2]}")
    return [*a[:-2], a[-2], b[-1]]


def layer_norm(args, shapes, values=None) -> Shape:
    """``[..., d]`` with weight and bias ``[d]`` → ``[..., d]``."""
    x, w, b = shapes
    if not x:
        raise ShapeError("layer_norm's input must have rank 1 or more")
    for what, s in (("weight", w), ("bias", b)):
        if list(s) != [x[-1]]:
            raise ShapeError(f"layer_norm's {what} must have shape [{x[-1]}], got {list(s)}")
    return list(x)


def softmax(args, shapes, values=None) -> Shape:
    """The input's shape; ``dim`` in range."""
    dim_index(args["dim"], len(shapes[0]))
    return list(shapes[0])


def upsample_nearest1d(args, shapes, values=None) -> Shape:
    """``[b, c, l]`` → ``[b, c, size]``."""
    _rank(shapes[0], 3, "upsample_nearest1d's input [b, c, l]")
    return [*shapes[0][:2], args["size"]]


def upsample_nearest2d(args, shapes, values=None) -> Shape:
    """``[b, c, h, w]`` → ``[b, c, size[0], size[1]]``."""
    _rank(shapes[0], 4, "upsample_nearest2d's input [b, c, h, w]")
    return [*shapes[0][:2], *args["size"]]


def elementwise2(args, shapes, values=None) -> Shape:
    """Two equal shapes → that shape."""
    _equal("an element-wise op", *shapes)
    return list(shapes[0])


def reduce(args, shapes, values=None) -> Shape:
    """``dims`` (None: every one) removed, or kept with size 1 with ``keepdim``."""
    (x,) = shapes
    return _reduced(x, _reduce_dims(args, x), args["keepdim"])


def reduce_extremum(args, shapes, values=None) -> Shape:
    """As :func:`reduce`; a reduced dimension must not be empty (amax/amin)."""
    (x,) = shapes
    dims = _reduce_dims(args, x)
    if any(x[i] == 0 for i in dims if x):
        raise ShapeError("cannot take the maximum or minimum over an empty dimension")
    return _reduced(x, dims, args["keepdim"])


def argextremum(args, shapes, values=None) -> Shape:
    """``dim`` removed (kept with size 1 with ``keepdim``); int64 output."""
    (x,) = shapes
    d = dim_index(args["dim"], len(x))
    if x and x[d] == 0:
        raise ShapeError("cannot take the index of an extremum over an empty dimension")
    return _reduced(x, [d], args["keepdim"])


def sort(args, shapes, values=None) -> Shape:
    """The input's shape; ``dim`` in range (argsort: int64 output)."""
    dim_index(args["dim"], len(shapes[0]))
    return list(shapes[0])


def embedding(args, shapes, values=None) -> Shape:
    """int64 indices of any shape by weight ``[v, d]`` → ``[..., d]``."""
    idx, w = shapes
    _rank(w, 2, "embedding's weight [v, d]")
    _index_values("index", (values or [None])[0], w[0])
    return [*idx, w[1]]


def index_select(args, shapes, values=None) -> Shape:
    """``x`` with ``dim``'s size replaced by the length of the 1-D int64 ``index``."""
    x, idx = shapes
    d = dim_index(args["dim"], len(x))
    _rank(idx, 1, "index_select's index")
    if x:
        _index_values("index", (values or [None, None])[1], x[d])
    return [*x[:d], idx[0], *x[d + 1 :]] if x else [idx[0]]


def gather(args, shapes, values=None) -> Shape:
    """``index``'s shape; same rank as ``x``, no larger except along ``dim``."""
    x, idx = shapes
    d = dim_index(args["dim"], len(x))
    if len(idx) != len(x):
        raise ShapeError(f"gather's index {list(idx)} must have x's rank ({len(x)})")
    for i, (n, m) in enumerate(zip(x, idx, strict=True)):
        if i != d and m > n:
            raise ShapeError(
                f"gather's index {list(idx)} is larger than x {list(x)} along dim {i} "
                f"(only dim {d} may differ)"
            )
    if x:
        _index_values("index", (values or [None, None])[1], x[d])
    return list(idx)


def bce_with_logits(args, shapes, values=None) -> Shape:
    """Equal shapes → ``[]`` (the mean)."""
    _equal("bce_with_logits", *shapes)
    return []


def _class_loss(op: str, args, shapes, values) -> Shape:
    x, t = shapes
    _rank(x, 2, f"{op}'s input [n, c]")
    if list(t) != [x[0]]:
        raise ShapeError(f"{op}'s targets must have shape [{x[0]}], got {list(t)}")
    _index_values("target", (values or [None, None])[1], x[1])
    return [x[0]] if args["reduction"] == "none" else []


def cross_entropy(args, shapes, values=None) -> Shape:
    """Logits ``[n, c]`` and int64 targets ``[n]`` → ``[]`` or ``[n]`` (none)."""
    return _class_loss("cross_entropy", args, shapes, values)


def nll(args, shapes, values=None) -> Shape:
    """Log-probabilities ``[n, c]`` and int64 targets ``[n]`` → ``[]`` or ``[n]`` (none)."""
    return _class_loss("nll", args, shapes, values)


def mse(args, shapes, values=None) -> Shape:
    """Equal shapes → ``[]``, or that shape (none)."""
    _equal("mse", *shapes)
    return list(shapes[0]) if args["reduction"] == "none" else []


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
    "avg_pool2d": avg_pool2d,
    "linear": linear,
    "matmul": matmul,
    "layer_norm": layer_norm,
    "softmax": softmax,
    "log_softmax": softmax,
    "upsample_nearest1d": upsample_nearest1d,
    "upsample_nearest2d": upsample_nearest2d,
    **dict.fromkeys(
        ["relu", "abs", "sigmoid", "tanh", "silu", "gelu", "elu", "exp", "log", "sqrt"],
        same_shape,
    ),
    **dict.fromkeys(["add", "sub", "mul", "div"], elementwise2),
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
    "bce_with_logits": bce_with_logits,
    "cross_entropy": cross_entropy,
    "nll": nll,
    "mse": mse,
}

#: (least, most) input tensors per op; every other op takes one.
ARITY: dict[str, tuple[int, int]] = {
    "linear": (2, 3),
    "layer_norm": (3, 3),
    **dict.fromkeys(
        [
            "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "matmul", "add",
            "sub", "mul", "div", "embedding", "index_select", "gather", "bce_with_logits",
            "cross_entropy", "nll", "mse",
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
        x, w = shapes
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
    shape, float; each stacked to ``[n, ...]`` when ``case["optimizer_steps"]`` n > 1.

    Raises :class:`CaseShapeError` as :func:`tensor_shapes`, or for a quantity whose tensor
    does not exist (field ``compare``).
    """
    known = tensor_shapes(inputs, case)
    steps = case.get("optimizer_steps", 1)
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
        out[q] = (stacked(shape, steps), kind)
    return out
