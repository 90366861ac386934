"""Generators of the ops with integer inputs, the indexing writes and the losses:
``embedding``, ``index_select``, ``gather``, ``scatter_add``, ``scatter``, ``index_add``,
``index_put``, ``bce_with_logits``, ``cross_entropy``, ``nll`` and ``mse``; and the values
of their integer inputs (:func:`index_values`).

Index shapes are drawn from PyTorch's whole domain: a ``gather`` or ``scatter`` index may be
smaller than the input along every dimension but ``dim`` (and longer along ``dim`` where
PyTorch allows it: gather, scatter_add), an ``index_select``/``index_add``/``index_put``
index any length 1–6 with repeated entries. Index values are uniform in range
(:func:`index_bound`); where a repeated index makes PyTorch's result depend on the order of
writes (``scatter``, ``index_put`` without ``accumulate``) they are distinct along the
written dimension and the index is stored contiguous (:data:`UNIQUE_INDEX`), so no layout
route repeats them. Class targets are in 0 … c − 1; ``bce_with_logits``' targets 0 or 1
(burn takes them as integers) and without a gradient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from parity.fuzz.generators.common import d, pick, shape

#: Ops whose index must not repeat a written position (the result would depend on the
#: order of the writes): its values are drawn distinct and it takes no layout route.
UNIQUE_INDEX = frozenset({"scatter", "index_put"})


def _dim(rng, rank: int) -> int:
    return int(rng.integers(-rank, rank))


def embedding(rng):
    """int64 indices of rank 1–3 into a weight ``[v, d]``."""
    return [shape(rng, 1, 3), [d(rng), d(rng)]], {}


def index_select(rng):
    """``x`` of rank 1–4 and a 1-D index of length 1–6 along ``dim``."""
    x = shape(rng)
    return [x, [d(rng)]], {"dim": _dim(rng, len(x))}


def _dim_index_shape(rng, x: list[int], dim: int, longer: bool) -> list[int]:
    """An index of ``x``'s rank: along ``dim`` 1–6 (``longer``) or at most ``x``'s size,
    elsewhere at most ``x``'s size (equal to it half of the time)."""
    k = dim % len(x)
    same = rng.random() < 0.5
    out = []
    for i, n in enumerate(x):
        if i == k:
            out.append(d(rng) if longer else d(rng, 1, n))
        else:
            out.append(n if same else d(rng, 1, n))
    return out


def gather(rng):
    """``x`` and an index of its rank, smaller outside ``dim`` half of the time."""
    x = shape(rng)
    dim = _dim(rng, len(x))
    return [x, _dim_index_shape(rng, x, dim, True)], {"dim": dim}


def scatter_like(rng, op: str):
    """``[x, index, src]``, index and src of one shape (x's rank, smaller outside ``dim``
    half of the time; along ``dim`` 1–6 for scatter_add, at most x's size for scatter)."""
    x = shape(rng)
    dim = _dim(rng, len(x))
    idx = _dim_index_shape(rng, x, dim, op == "scatter_add")
    return [x, idx, list(idx)], {"dim": dim}


def index_add(rng):
    """``[x, index (1-D), src]`` with src x's shape but ``len(index)`` along ``dim``."""
    x = shape(rng)
    dim = _dim(rng, len(x))
    k = dim % len(x)
    m = d(rng)
    return [x, [m], [*x[:k], m, *x[k + 1 :]]], {"dim": dim}


def index_put(rng):
    """``[x, index (1-D), values [len(index), *x[1:]]]``; accumulate or not (without it,
    at most x's rows, distinct)."""
    x = shape(rng)
    accumulate = bool(rng.random() < 0.5)
    m = d(rng) if accumulate else d(rng, 1, x[0])
    return [x, [m], [m, *x[1:]]], {"accumulate": accumulate}


def bce_with_logits(rng):
    """Logits and targets of one shape, rank 1–4."""
    s = shape(rng)
    return [s, list(s)], {}


def class_loss(rng):
    """Scores ``[n, c]`` and int64 targets ``[n]``; every reduction."""
    n, c = d(rng), d(rng)
    return [[n, c], [n]], {"reduction": pick(rng, ["mean", "sum", "none"])}


def mse(rng):
    """Input and target of one shape; every reduction."""
    s = shape(rng)
    return [s, list(s)], {"reduction": pick(rng, ["mean", "sum", "none"])}


#: op → generator.
INDEX = {
    "embedding": embedding,
    "index_select": index_select,
    "gather": gather,
    "scatter_add": lambda rng: scatter_like(rng, "scatter_add"),
    "scatter": lambda rng: scatter_like(rng, "scatter"),
    "index_add": index_add,
    "index_put": index_put,
    "bce_with_logits": bce_with_logits,
    "cross_entropy": class_loss,
    "nll": class_loss,
    "mse": mse,
}


def index_bound(op: str, args: Mapping[str, Any], shapes: Sequence[Sequence[int]]) -> int:
    """The size the values of ``op``'s integer input must stay below: the weight's rows
    (embedding), x's size along ``dim`` (index_select, gather, the scatters, index_add),
    x's rows (index_put), the classes (cross_entropy, nll)."""
    if op == "embedding":
        return int(shapes[1][0])
    if op == "index_put":
        return int(shapes[0][0])
    if op in ("cross_entropy", "nll"):
        return int(shapes[0][1])
    x = shapes[0]
    return int(x[args["dim"] % len(x)])


def index_values(
    rng, op: str, args: Mapping[str, Any], shapes: Sequence[Sequence[int]], stored: Sequence[int]
) -> np.ndarray:
    """Values (float64 holding integers, flat) of the integer input of ``op`` stored with
    shape ``stored``: uniform in 0 … :func:`index_bound` − 1, or distinct along the written
    dimension for :data:`UNIQUE_INDEX` ops (whose index is stored as the op sees it)."""
    bound = index_bound(op, args, shapes)
    n = int(np.prod(stored))
    if op == "index_put" and not args.get("accumulate", False):
        return rng.permutation(bound)[:n].astype(np.float64)
    if op == "scatter":
        k = args["dim"] % len(stored)
        keys = rng.random((*stored[:k], bound, *stored[k + 1 :]))
        order = np.argsort(keys, axis=k)
        return np.take(order, range(stored[k]), axis=k).astype(np.float64).reshape(-1)
    return rng.integers(0, bound, size=n).astype(np.float64)


def repeats_a_write(op: str, args: Mapping[str, Any], index: np.ndarray) -> bool:
    """Whether the logical ``index`` of a :data:`UNIQUE_INDEX` op writes one position twice
    (scatter: a value repeated along ``dim``; index_put without accumulate: a repeated
    row)."""
    if op == "index_put":
        return not args.get("accumulate", False) and len(set(index.reshape(-1))) < index.size
    if op != "scatter":
        return False
    k = args["dim"] % index.ndim
    lines = np.moveaxis(index, k, -1).reshape(-1, index.shape[k])
    return any(len(set(line)) < len(line) for line in lines)
