"""Shape rules of the dense ops of the probe language: ``linear``, ``matmul`` (equal
batch dimensions, no broadcasting), ``layer_norm``, ``rms_norm``, ``softmax``, the
element-wise ops of two inputs (equal shapes: ``add``, ``sub``, ``mul``, ``div``,
``maximum``, ``minimum``), the reductions (``sum``, ``mean``, ``max``, ``min``), ``argmax``,
``argmin`` and the sorts.
"""

from __future__ import annotations

from collections.abc import Mapping

from parity.probe.shapes.common import Shape, ShapeError, check_equal, check_rank, dim_index

# Each: f(args, shapes, values) -> output shape. ``values`` holds, per input, its flat
# values when known (a probe input), else None. Kinds are checked by ``shapes.infer``.


def linear(args, shapes, values=None) -> Shape:
    """``[..., in]`` by ``[out, in]`` (+ bias ``[out]``) → ``[..., out]``."""
    x, w = shapes[0], shapes[1]
    if not x:
        raise ShapeError("linear's input must have rank 1 or more")
    check_rank(w, 2, "linear's weight [out, in]")
    if w[1] != x[-1]:
        raise ShapeError(f"the weight {list(w)} takes {w[1]} features, the input has {x[-1]}")
    if len(shapes) > 2:
        check_rank(shapes[2], 1, "linear's bias [out]")
        if shapes[2][0] != w[0]:
            raise ShapeError(f"the bias {list(shapes[2])} must have {w[0]} elements")
    return [*x[:-1], w[0]]


def matmul(args, shapes, values=None) -> Shape:
    """``[..., m, k]`` by ``[..., k, n]`` with equal batch dims → ``[..., m, n]``."""
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul needs operands of rank 2 or more, got {list(a)} and {list(b)}")
    check_equal("matmul", a[:-2], b[:-2], "batch dimensions")
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


def rms_norm(args, shapes, values=None) -> Shape:
    """``[..., d]`` with weight ``[d]`` → ``[..., d]``."""
    x, w = shapes
    if not x:
        raise ShapeError("rms_norm's input must have rank 1 or more")
    if list(w) != [x[-1]]:
        raise ShapeError(f"rms_norm's weight must have shape [{x[-1]}], got {list(w)}")
    return list(x)


def softmax(args, shapes, values=None) -> Shape:
    """The input's shape; ``dim`` in range."""
    dim_index(args["dim"], len(shapes[0]))
    return list(shapes[0])


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


def elementwise2(args, shapes, values=None) -> Shape:
    """Two equal shapes → that shape."""
    check_equal("an element-wise op", *shapes)
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
