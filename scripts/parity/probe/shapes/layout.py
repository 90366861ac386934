"""Shape rules of the layout ops of the probe language: ``transpose``, ``narrow``,
``broadcast_to`` (PyTorch's ``expand``), ``unsqueeze``, ``squeeze``, ``reshape``, and the
ops that keep their input's shape (``contiguous``, the element-wise ops of one input).
"""

from __future__ import annotations

import math

from parity.probe.shapes.common import Shape, ShapeError, dim_index

# Each: f(args, shapes, values) -> output shape. ``values`` holds, per input, its flat
# values when known (a probe input), else None. Kinds are checked by ``shapes.infer``.


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
