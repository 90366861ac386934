"""The table of the fuzzer's op generators, one per op of the probe language
(:data:`GENERATORS`), and the order their random streams are seeded in
(:data:`SEED_ORDER`).

A generator is ``f(rng) → (input shapes, YAML arguments)``; ``generate.make_case`` checks
the draw with ``probe_shapes.infer`` and redraws what PyTorch refuses. The generators of
the dense ops, the element-wise ops, the reductions, the sorts and the layout ops are
here; those of the spatial ops in ``generators.spatial``, of the ops with integer inputs
and the losses in ``generators.index``.

**Seeding.** Op ``op``'s cases come from a numpy Generator seeded with ``[seed,
SEED_ORDER.index(op)]``. The first 27 entries are the ops of the first version of the
fuzzer, in the (sorted) order they were seeded in then; every op added since is appended,
so adding an op leaves every other op's cases as they were (``tests/test_fuzz_ops.py``
holds both).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parity.fuzz.generators.common import Generator, d, pick, shape
from parity.fuzz.generators.index import INDEX
from parity.fuzz.generators.spatial import SPATIAL


def matmul(rng):
    """``[…, m, k]`` by ``[…, k, n]`` with 0–2 equal batch dimensions."""
    batch = [d(rng, 1, 4) for _ in range(int(rng.integers(0, 3)))]
    m, k, n = d(rng), d(rng), d(rng)
    return [[*batch, m, k], [*batch, k, n]], {}


def linear(rng):
    """``[…, in]`` by ``[out, in]``, a bias ``[out]`` half of the time."""
    x = shape(rng, 1, 3)
    out = d(rng)
    shapes = [x, [out, x[-1]]]
    if rng.random() < 0.5:
        shapes.append([out])
    return shapes, {}


def unary(rng):
    """One input of rank 1–4."""
    return [shape(rng)], {}


def binary(rng):
    """Two inputs of one shape."""
    s = shape(rng)
    return [s, list(s)], {}


def dim_op(rng):
    """One input and a ``dim``."""
    s = shape(rng)
    return [s], {"dim": int(rng.integers(-len(s), len(s)))}


def softmax(rng):
    """As :func:`dim_op`, fused in candle half of the time where ``dim`` is the last."""
    shapes, args = dim_op(rng)
    args["candle"] = "fused" if args["dim"] == -1 and rng.random() < 0.5 else "slow"
    return shapes, args


def reduce(rng):
    """One input; one ``dim``, two, or every one; ``keepdim``."""
    s = shape(rng)
    r = len(s)
    p = rng.random()
    args: dict[str, Any] = {"keepdim": bool(rng.random() < 0.5)}
    if p < 0.5:
        args["dim"] = int(rng.integers(-r, r))
    elif p < 0.8 and r > 1:
        args["dim"] = sorted(int(x) for x in rng.choice(r, size=2, replace=False))
    return [s], args


def layer_norm(rng):
    """``[…, d]`` with weight and bias ``[d]``; candle's fused or slow version."""
    x = shape(rng, 1, 3)
    return [x, [x[-1]], [x[-1]]], {"candle": str(rng.choice(["fused", "slow"]))}


def rms_norm(rng):
    """``[…, d]`` with a weight ``[d]``; eps 1e-5 or 1e-6; candle's fused or slow
    version."""
    x = shape(rng, 1, 3)
    return [x, [x[-1]]], {"eps": pick(rng, [1e-5, 1e-6]), "candle": pick(rng, ["fused", "slow"])}


def gelu(rng):
    """One input; the exact or the tanh approximation."""
    return [shape(rng)], {"approximate": pick(rng, ["none", "tanh"])}


def elu(rng):
    """One input; alpha ½, 1 or 2."""
    return [shape(rng)], {"alpha": pick(rng, [0.5, 1.0, 2.0])}


def arg_extremum(rng):
    """One input, a ``dim`` (required), ``keepdim``."""
    s = shape(rng)
    return [s], {"dim": int(rng.integers(-len(s), len(s))), "keepdim": bool(rng.random() < 0.5)}


def sort(rng):
    """One input, a ``dim``, ``descending``."""
    s = shape(rng)
    return [s], {"dim": int(rng.integers(-len(s), len(s))), "descending": bool(rng.random() < 0.5)}


def transpose(rng):
    """Two dimensions (maybe the same) of an input of rank 1–4."""
    s = shape(rng)
    r = len(s)
    return [s], {"dim0": int(rng.integers(-r, r)), "dim1": int(rng.integers(-r, r))}


def narrow(rng):
    """A slice ``start`` … ``start + length`` of one dimension (``start`` may be 0)."""
    s = shape(rng)
    k = int(rng.integers(len(s)))
    start = int(rng.integers(0, s[k]))
    return [s], {"dim": k, "start": start, "length": d(rng, 1, s[k] - start)}


def broadcast_to(rng):
    """An input with some size-1 dimensions expanded to 2–4, maybe new leading ones (rank
    at most 4)."""
    s = shape(rng, 1, 4)
    s = [1 if rng.random() < 0.5 else n for n in s]
    target = [d(rng, 2, 4) if n == 1 and rng.random() < 0.7 else n for n in s]
    lead = [d(rng, 1, 3) for _ in range(int(rng.integers(0, 5 - len(s))))]
    return [s], {"shape": [*lead, *target]}


def unsqueeze(rng):
    """A new dimension anywhere in an input of rank 1–3."""
    s = shape(rng, 1, 3)
    return [s], {"dim": int(rng.integers(-len(s) - 1, len(s) + 1))}


def squeeze(rng):
    """One dimension of an input of rank 2–4, of size 1 most of the time (another is kept,
    as in PyTorch)."""
    s = shape(rng, 2, 4)
    k = int(rng.integers(len(s)))
    if rng.random() < 0.7:
        s[k] = 1
    return [s], {"dim": k - len(s) if rng.random() < 0.5 else k}


def reshape(rng):
    """The input's elements in a random shape of rank 1–4 (the prime factors of the count
    dealt out at random)."""
    s = shape(rng)
    n = int(np.prod(s))
    factors = []
    p = 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    out = [1] * d(rng, 1, 4)
    for f in factors:
        out[int(rng.integers(len(out)))] *= f
    return [s], {"shape": out}


#: op → generator, every op of the probe language (``tests/test_fuzz_ops.py`` holds it).
GENERATORS: dict[str, Generator] = {
    **SPATIAL,
    "matmul": matmul,
    "linear": linear,
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
    "softmax": softmax,
    "log_softmax": dim_op,
    **dict.fromkeys(
        ["relu", "abs", "sigmoid", "tanh", "silu", "exp", "log", "sqrt", "contiguous"], unary
    ),
    "gelu": gelu,
    "elu": elu,
    **dict.fromkeys(["add", "sub", "mul", "div", "maximum", "minimum"], binary),
    **dict.fromkeys(["sum", "mean", "max", "min"], reduce),
    **dict.fromkeys(["argmax", "argmin"], arg_extremum),
    **dict.fromkeys(["sort", "argsort"], sort),
    "transpose": transpose,
    "narrow": narrow,
    "broadcast_to": broadcast_to,
    "unsqueeze": unsqueeze,
    "squeeze": squeeze,
    "reshape": reshape,
    **INDEX,
}

#: The ops of the fuzzer's first version, in the order their streams were seeded then.
FIRST_OPS = (
    "abs", "add", "avg_pool2d", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "div", "exp", "layer_norm", "linear", "log_softmax", "matmul", "max", "max_pool2d",
    "mean", "min", "mul", "relu", "sigmoid", "silu", "softmax", "sub", "sum", "tanh",
    "upsample_nearest1d", "upsample_nearest2d",
)  # fmt: skip
#: The stream index of every op: :data:`FIRST_OPS`, then each op added since, appended.
SEED_ORDER = (
    *FIRST_OPS,
    "transpose", "narrow", "broadcast_to", "unsqueeze", "squeeze", "reshape", "contiguous",
    "max_pool1d", "avg_pool1d", "pad", "rms_norm", "gelu", "elu", "log", "sqrt",
    "maximum", "minimum", "argmax", "argmin", "sort", "argsort", "embedding",
    "index_select", "gather", "scatter_add", "index_add", "scatter", "index_put",
    "bce_with_logits", "cross_entropy", "nll", "mse",
)  # fmt: skip
