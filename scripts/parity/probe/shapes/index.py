"""Shape rules of the index ops and losses of the probe language: ``embedding``,
``index_select`` and ``gather``, the indexing writes ``scatter_add``, ``scatter``,
``index_add`` and ``index_put`` (int64 indices, range-checked where their values are
known), and the losses (``bce_with_logits``, ``cross_entropy`` and ``nll`` with int64 class
targets, ``mse``).
"""

from __future__ import annotations

from parity.probe.shapes.common import (
    Shape,
    ShapeError,
    check_equal,
    check_index_values,
    check_rank,
    dim_index,
)

# Each: f(args, shapes, values) -> output shape. ``values`` holds, per input, its flat
# values when known (a probe input), else None. Kinds are checked by ``shapes.infer``.


def embedding(args, shapes, values=None) -> Shape:
    """int64 indices of any shape by weight ``[v, d]`` → ``[..., d]``."""
    idx, w = shapes
    check_rank(w, 2, "embedding's weight [v, d]")
    check_index_values("index", (values or [None])[0], w[0])
    return [*idx, w[1]]


def index_select(args, shapes, values=None) -> Shape:
    """``x`` with ``dim``'s size replaced by the length of the 1-D int64 ``index``."""
    x, idx = shapes
    d = dim_index(args["dim"], len(x))
    check_rank(idx, 1, "index_select's index")
    if x:
        check_index_values("index", (values or [None, None])[1], x[d])
    return [*x[:d], idx[0], *x[d + 1 :]] if x else [idx[0]]


def gather(args, shapes, values=None) -> Shape:
    """``index``'s shape; same rank as ``x``, no larger except along ``dim``."""
    x, idx = shapes
    _check_dim_index("gather", x, idx, dim_index(args["dim"], len(x)), values)
    return list(idx)


def _check_dim_index(op, x, idx, d, values) -> None:
    """An index along ``dim`` ``d`` (gather, scatter): x's rank, no larger than ``x``
    except along ``d``, its values (input 1) in range of ``x``'s size there; else
    :class:`ShapeError` naming ``op``."""
    if len(idx) != len(x):
        raise ShapeError(f"{op}'s index {list(idx)} must have x's rank ({len(x)})")
    for i, (n, m) in enumerate(zip(x, idx, strict=True)):
        if i != d and m > n:
            raise ShapeError(
                f"{op}'s index {list(idx)} is larger than x {list(x)} along dim {i} "
                f"(only dim {d} may differ)"
            )
    if x:
        check_index_values("index", (values or [None, None])[1], x[d])


def scatter(args, shapes, values=None) -> Shape:
    """``scatter`` and ``scatter_add``: ``[x, index, src]`` → x's shape. ``index`` has
    ``src``'s shape (PyTorch reads only an index-shaped corner of a larger ``src``; the probe
    language asks for equal shapes) and x's rank, no larger than x except along ``dim``."""
    x, idx, src = shapes
    d = dim_index(args["dim"], len(x))
    if list(idx) != list(src):
        raise ShapeError(f"scatter's index {list(idx)} must have src's shape {list(src)}")
    _check_dim_index("scatter", x, idx, d, values)
    return list(x)


def index_add(args, shapes, values=None) -> Shape:
    """``[x, index (1-D), src]`` → x's shape; ``src`` is x's shape with ``dim``'s size
    ``len(index)``."""
    x, idx, src = shapes
    d = dim_index(args["dim"], len(x))
    check_rank(idx, 1, "index_add's index")
    want = [*x[:d], idx[0], *x[d + 1 :]] if x else [idx[0]]
    if list(src) != want:
        raise ShapeError(f"index_add's src must have shape {want}, got {list(src)}")
    if x:
        check_index_values("index", (values or [None, None])[1], x[d])
    return list(x)


def index_put(args, shapes, values=None) -> Shape:
    """``[x, index (1-D), values]`` → x's shape; ``values`` is
    ``[len(index), *x.shape[1:]]`` (the rows ``index`` of dimension 0)."""
    x, idx, vals = shapes
    if not x:
        raise ShapeError("index_put's x must have at least one dimension")
    check_rank(idx, 1, "index_put's index")
    want = [idx[0], *x[1:]]
    if list(vals) != want:
        raise ShapeError(f"index_put's values must have shape {want}, got {list(vals)}")
    check_index_values("index", (values or [None, None])[1], x[0])
    return list(x)


def bce_with_logits(args, shapes, values=None) -> Shape:
    """Equal shapes → ``[]`` (the mean)."""
    check_equal("bce_with_logits", *shapes)
    return []


def _class_loss(op: str, args, shapes, values) -> Shape:
    x, t = shapes
    check_rank(x, 2, f"{op}'s input [n, c]")
    if list(t) != [x[0]]:
        raise ShapeError(f"{op}'s targets must have shape [{x[0]}], got {list(t)}")
    check_index_values("target", (values or [None, None])[1], x[1])
    return [x[0]] if args["reduction"] == "none" else []


def cross_entropy(args, shapes, values=None) -> Shape:
    """Logits ``[n, c]`` and int64 targets ``[n]`` → ``[]`` or ``[n]`` (none)."""
    return _class_loss("cross_entropy", args, shapes, values)


def nll(args, shapes, values=None) -> Shape:
    """Log-probabilities ``[n, c]`` and int64 targets ``[n]`` → ``[]`` or ``[n]`` (none)."""
    return _class_loss("nll", args, shapes, values)


def mse(args, shapes, values=None) -> Shape:
    """Equal shapes → ``[]``, or that shape (none)."""
    check_equal("mse", *shapes)
    return list(shapes[0]) if args["reduction"] == "none" else []
