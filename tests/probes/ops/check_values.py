"""Recompute every ``exact`` value of the op probes in this folder with plain numpy float64.

An independent check of the probe files ``tests/probes/ops/*.yaml`` (probe language v2):
it shares no code with the workflow (``scripts/parity``), PyTorch or the Rust runners. Each
op is written here from its definition (the direct sums of a convolution, the windows of a
pooling, the formulas of PyTorch's optimizer documentation); a gradient is the
vector-Jacobian product of that definition, for ops linear in an input the Jacobian's
columns evaluated one unit vector at a time.

For every case with ``exact`` values the script

1. runs the case in float64 and asserts that each exact list has the quantity's shape
   (a single number only for a one-element quantity, ``{fill: v}`` for every element) and
   equals the computed values exactly;
2. runs it again rounding every input, op result, gradient and optimizer state to float32,
   and asserts the same values: the exact values are exact in float32 (and, for the files
   meant for half precision, ``half.yaml``, also in float16 and bfloat16, where every
   accumulated sum is also bounded by the largest integer the format holds exactly); for
   the other files it only reports whether they would also hold in float16/bfloat16;
3. for cases with ``expect: error``, asserts that the steps are refused (shape or index
   checks) before any value is computed.

A compared quantity without exact values needs a tolerance (file or case); the script
says which quantities are compared with PyTorch instead. Run: ``python
tests/probes/ops/check_values.py [FILE ...]`` (default: every ``*.yaml`` here and
``probes/softmax_transposed.yaml``); ``--print`` shows the computed values of every
quantity. Exit status 1 on the first failed assertion.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
#: Files whose exact values must also be exact in float16 and bfloat16.
HALF_FILES = {"half.yaml"}
#: Largest integer below which every integer is exact: float16 (11 significant bits) and
#: bfloat16 (8).
HALF_INTEGER_LIMIT = {"f16": 2048, "bf16": 256}


class Refused(Exception):
    """The steps cannot run: a shape mismatch or an index out of range."""


# ----------------------------------------------------------------------------- rounding


def round_bf16(a: np.ndarray) -> np.ndarray:
    """Round float64 values to bfloat16 (nearest, ties to even) via float32, as float64."""
    f = np.asarray(a, dtype=np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


ROUNDERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "f64": lambda a: np.asarray(a, dtype=np.float64),
    "f32": lambda a: np.asarray(a, dtype=np.float64).astype(np.float32).astype(np.float64),
    "f16": lambda a: np.asarray(a, dtype=np.float64).astype(np.float16).astype(np.float64),
    "bf16": round_bf16,
}


# ----------------------------------------------------------------------------- helpers


def need(cond: bool, why: str) -> None:
    """Raise :class:`Refused` with ``why`` unless ``cond``."""
    if not cond:
        raise Refused(why)


def norm_dim(d: int, rank: int) -> int:
    """A signed dimension as an index below ``rank`` (refused when out of range)."""
    need(-rank <= d < rank, f"dimension {d} out of range for rank {rank}")
    return d % rank


def pair(v) -> tuple[int, int]:
    """A pair argument written as one int or ``[h, w]``."""
    if isinstance(v, list):
        assert len(v) == 2, v
        return int(v[0]), int(v[1])
    return int(v), int(v)


def linear_vjp(f: Callable[[np.ndarray], np.ndarray], shape, g: np.ndarray) -> np.ndarray:
    """gᵀ·J for a function ``f`` linear in its argument of ``shape``: one unit vector at a
    time (exact for small integers)."""
    out = np.zeros(int(np.prod(shape)))
    for i in range(out.size):
        e = np.zeros(out.size)
        e[i] = 1.0
        out[i] = float(np.sum(f(e.reshape(shape)) * g))
    return out.reshape(shape)


# ----------------------------------------------------------------------------- convolutions


def conv2d(x, w, stride, padding, dilation, groups):
    """Direct 2-D cross-correlation of x [b, c_in, h, w] with w [c_out, c_in/groups, kh, kw]."""
    need(x.ndim == 4 and w.ndim == 4, "conv2d needs rank-4 input and kernel")
    b, cin, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    need(cin == cin_g * groups and cout % groups == 0, "conv2d channels do not match groups")
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    need(ho >= 1 and wo >= 1, "conv2d output would be empty")
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((b, cout, ho, wo))
    cout_g = cout // groups
    for o in range(cout):
        g = o // cout_g
        for i in range(ho):
            for j in range(wo):
                patch = xp[
                    :,
                    g * cin_g : (g + 1) * cin_g,
                    i * sh : i * sh + dh * (kh - 1) + 1 : dh,
                    j * sw : j * sw + dw * (kw - 1) + 1 : dw,
                ]
                out[:, o, i, j] = np.sum(patch * w[o], axis=(1, 2, 3))
    return out


def conv_transpose2d(x, w, stride, padding, output_padding, dilation, groups):
    """Transposed 2-D convolution by its scatter definition: each input element adds
    x·w[c_in, c_out, ki, kj] at (i·s + ki·d − p, j·s + kj·d − p)."""
    need(x.ndim == 4 and w.ndim == 4, "conv_transpose2d needs rank-4 input and kernel")
    b, cin, h, wd = x.shape
    cin_w, cout_g, kh, kw = w.shape
    need(cin == cin_w and cin % groups == 0, "conv_transpose2d channels do not match")
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    need(oph < max(sh, dh) and opw < max(sw, dw), "output_padding too large")
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    need(ho >= 1 and wo >= 1, "conv_transpose2d output would be empty")
    full = np.zeros((b, cout_g * groups, ph + ho + ph, pw + wo + pw))
    cin_g = cin // groups
    for c in range(cin):
        g = c // cin_g
        for oc in range(cout_g):
            for i in range(h):
                for j in range(wd):
                    for ki in range(kh):
                        for kj in range(kw):
                            full[:, g * cout_g + oc, i * sh + ki * dh, j * sw + kj * dw] += (
                                x[:, c, i, j] * w[c, oc, ki, kj]
                            )
    return full[:, :, ph : ph + ho, pw : pw + wo]


def windows(size, k, s, p, d=1, ceil_mode=False):
    """Per pooling window along one axis, the positions it covers in the padded input
    (``size`` + 2·``p``, input element i at i + p). PyTorch's documentation (MaxPool1d,
    AvgPool1d): ⌊(size + 2p − d(k − 1) − 1)/s⌋ + 1 windows, rounded up instead in ceil
    mode, where a window may run past the end but one that would start in the right
    padding is dropped; padding at most half the kernel."""
    last = size + 2 * p - d * (k - 1) - 1  # the last start that fits in the padded input
    need(last >= 0 and 2 * p <= k, "pooling input below the kernel or padding above half")
    n = (-(-last // s) if ceil_mode else last // s) + 1
    starts = [i * s for i in range(n) if i * s < size + p]
    return [[a + j * d for j in range(k)] for a in starts]


def pool_windows(x, kernel, stride, padding, dilation, ceil_mode):
    """(windows along h, windows along w) of a [b, c, h, w] input, as :func:`windows`."""
    need(x.ndim == 4, "pooling needs rank 4 (rank 3 for 1-D)")
    h, wd = x.shape[2:]
    return tuple(
        windows(n, k, s, p, d, ceil_mode)
        for n, k, s, p, d in zip((h, wd), kernel, stride, padding, dilation, strict=True)
    )


def max_pool2d(x, kernel, stride, padding, dilation=(1, 1), ceil_mode=False):
    """Max pooling with −∞ padding (and −∞ past the padded end in ceil mode); returns the
    output and, per output, the flat input index of the window's maximum (a tie inside a
    window is refused: no convention)."""
    rows, cols = pool_windows(x, kernel, stride, padding, dilation, ceil_mode)
    (ph, pw), (h, wd) = padding, x.shape[2:]
    idx = np.arange(x.size).reshape(x.shape)
    out = np.zeros((*x.shape[:2], len(rows), len(cols)))
    arg = np.zeros(out.shape, dtype=int)
    for n in range(x.shape[0]):
        for ch in range(x.shape[1]):
            for a, r in enumerate(rows):
                for bb, q in enumerate(cols):
                    cells = [
                        (x[n, ch, i - ph, j - pw], idx[n, ch, i - ph, j - pw])
                        for i in r
                        for j in q
                        if 0 <= i - ph < h and 0 <= j - pw < wd
                    ]
                    assert cells, "a window holds no input element"
                    m = max(v for v, _ in cells)
                    assert sum(v == m for v, _ in cells) == 1, f"tie inside a window: {cells}"
                    out[n, ch, a, bb] = m
                    arg[n, ch, a, bb] = next(i for v, i in cells if v == m)
    return out, arg


def avg_pool2d(x, kernel, stride, padding, count_include_pad=True, ceil_mode=False):
    """Average pooling: the sum of the window's input elements over the divisor, which
    counts the window's positions inside the padded input (count_include_pad, PyTorch's
    default) or only those inside the input; positions past the padded end (ceil mode)
    never count (PyTorch's AvgPool2d)."""
    rows, cols = pool_windows(x, kernel, stride, padding, (1, 1), ceil_mode)
    (ph, pw), (h, wd) = padding, x.shape[2:]
    out = np.zeros((*x.shape[:2], len(rows), len(cols)))
    for a, r in enumerate(rows):
        for bb, q in enumerate(cols):
            ri = [i - ph for i in r if 0 <= i - ph < h]
            cj = [j - pw for j in q if 0 <= j - pw < wd]
            if count_include_pad:
                div = sum(i < h + 2 * ph for i in r) * sum(j < wd + 2 * pw for j in q)
            else:
                div = len(ri) * len(cj)
            out[:, :, a, bb] = x[:, :, ri][:, :, :, cj].sum(axis=(2, 3)) / div
    return out


# ----------------------------------------------------------------------------- ops
# Each op: (args, inputs) -> (output, vjp); vjp(g) gives one gradient per input (None for
# integer inputs). Integer outputs are float arrays of integers with vjp None.


def reduce_dims(args, rank):
    dims = args.get("dim")
    if dims is None:
        return tuple(range(rank))
    dims = dims if isinstance(dims, list) else [dims]
    out = tuple(sorted({norm_dim(d, rank) for d in dims}))
    need(len(out) == len(dims), "a dimension is listed twice")
    return out


def op_reduce(kind):
    def run(args, ins):
        (x,) = ins
        dims = reduce_dims(args, x.ndim)
        keep = bool(args.get("keepdim", False))
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind]
        full = fn(x, axis=dims, keepdims=True)
        out = full if keep else np.squeeze(full, axis=dims)

        def vjp(g):
            gk = g.reshape(full.shape)
            if kind == "sum":
                return [np.broadcast_to(gk, x.shape).copy()]
            if kind == "mean":
                count = int(np.prod([x.shape[d] for d in dims]))
                return [np.broadcast_to(gk / count, x.shape).copy()]
            mask = (x == full).astype(float)  # ties share the gradient equally (amax)
            return [gk * mask / mask.sum(axis=dims, keepdims=True)]

        return out, vjp

    return run


def op_arg(kind):
    def run(args, ins):
        (x,) = ins
        d = norm_dim(args["dim"], x.ndim)
        idx = (np.argmax if kind == "argmax" else np.argmin)(x, axis=d)  # first among ties
        out = idx.astype(float)
        if args.get("keepdim", False):
            out = np.expand_dims(out, d)
        return out, None

    return run


def stable_order(x, d, descending):
    """Indices that sort ``x`` along ``d``, stable (ties keep their order)."""
    key = -x if descending else x
    return np.argsort(key, axis=d, kind="stable")


def op_sort(args, ins):
    (x,) = ins
    d = norm_dim(args.get("dim", -1), x.ndim)
    order = stable_order(x, d, args.get("descending", False))
    out = np.take_along_axis(x, order, axis=d)

    def vjp(g):
        gx = np.zeros_like(x)
        np.put_along_axis(gx, order, g, axis=d)
        return [gx]

    return out, vjp


def op_argsort(args, ins):
    (x,) = ins
    d = norm_dim(args.get("dim", -1), x.ndim)
    return stable_order(x, d, args.get("descending", False)).astype(float), None


def unary(f, df):
    """An element-wise op from its value f(x) and derivative df(x, y)."""

    def run(args, ins):
        (x,) = ins
        y = f(x, args)
        return y, lambda g: [g * df(x, y, args)]

    return run


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def phi_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


GELU_K = math.sqrt(2.0 / math.pi)


def gelu(x, args):
    if args.get("approximate", "none") == "tanh":
        return 0.5 * x * (1.0 + np.tanh(GELU_K * (x + 0.044715 * x**3)))
    return x * phi_cdf(x)


def gelu_grad(x, y, args):
    if args.get("approximate", "none") == "tanh":
        t = np.tanh(GELU_K * (x + 0.044715 * x**3))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * x**2)
    return phi_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def elu(x, args):
    a = args.get("alpha", 1.0)
    return np.where(x > 0, x, a * (np.exp(np.minimum(x, 0)) - 1))


def elu_grad(x, y, args):
    # PyTorch's elu_backward: alpha·eˣ where x <= 0 (so alpha at exactly 0), 1 above.
    a = args.get("alpha", 1.0)
    return np.where(x > 0, 1.0, a * np.exp(np.minimum(x, 0)))


def softmax_of(x, d):
    e = np.exp(x - np.max(x, axis=d, keepdims=True))
    return e / e.sum(axis=d, keepdims=True)


def op_softmax(args, ins):
    (x,) = ins
    d = norm_dim(args.get("dim", -1), x.ndim)
    y = softmax_of(x, d)
    return y, lambda g: [y * (g - np.sum(g * y, axis=d, keepdims=True))]


def op_rms_norm(args, ins):
    """y = x·r·w with r = 1/√(mean(x²) + eps) over the last dimension; dx = r·h −
    r³·x·mean(h·x) for h = g·w, dw = Σ g·x·r over every other dimension."""
    x, w = ins
    need(w.shape == x.shape[-1:], f"rms_norm's weight {w.shape} for an input {x.shape}")
    r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + args.get("eps", 1e-5))

    def vjp(g):
        h = g * w
        dx = r * h - r**3 * x * np.mean(h * x, axis=-1, keepdims=True)
        dw = np.sum((g * x * r).reshape(-1, x.shape[-1]), axis=0)
        return [dx, dw]

    return x * r * w, vjp


def op_log_softmax(args, ins):
    (x,) = ins
    d = norm_dim(args.get("dim", -1), x.ndim)
    s = softmax_of(x, d)
    y = np.log(s)
    return y, lambda g: [g - s * np.sum(g, axis=d, keepdims=True)]


def binary(f, da, db):
    def run(args, ins):
        a, b = ins
        need(a.shape == b.shape, f"element-wise op on unequal shapes {a.shape} and {b.shape}")
        return f(a, b), lambda g: [da(a, b, g), db(a, b, g)]

    return run


def op_matmul(args, ins):
    a, b = ins
    need(a.ndim >= 2 and b.ndim >= 2 and a.ndim == b.ndim, "matmul ranks")
    need(a.shape[:-2] == b.shape[:-2], "matmul batch dimensions differ")
    need(a.shape[-1] == b.shape[-2], f"matmul inner sizes differ: {a.shape} @ {b.shape}")
    out = a @ b
    return out, lambda g: [g @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ g]


def op_layout(kind):
    def run(args, ins):
        (x,) = ins
        if kind == "transpose":
            d0, d1 = norm_dim(args["dim0"], x.ndim), norm_dim(args["dim1"], x.ndim)
            return np.swapaxes(x, d0, d1), lambda g: [np.swapaxes(g, d0, d1)]
        if kind == "reshape":
            need(int(np.prod(args["shape"])) == x.size, "reshape to another element count")
            return x.reshape(args["shape"]), lambda g: [g.reshape(x.shape)]
        if kind == "unsqueeze":
            d = norm_dim(args["dim"], x.ndim + 1)
            return np.expand_dims(x, d), lambda g: [np.squeeze(g, d)]
        if kind == "contiguous":
            return x.copy(), lambda g: [g]
        if kind == "narrow":
            d = norm_dim(args["dim"], x.ndim)
            s, n = args["start"], args["length"]
            need(s + n <= x.shape[d], "narrow past the end")
            sl = [slice(None)] * x.ndim
            sl[d] = slice(s, s + n)

            def vjp(g):
                gx = np.zeros_like(x)
                gx[tuple(sl)] = g
                return [gx]

            return x[tuple(sl)], vjp
        raise NotImplementedError(kind)

    return run


def conv_args(args, two_d, transpose):
    """The (stride, padding, [output_padding,] dilation) pairs and groups of a conv op."""

    def conv(v, height):
        return pair(v) if two_d else (height, int(v))

    out = {
        "stride": conv(args.get("stride", 1), 1),
        "padding": conv(args.get("padding", 0), 0),
        "dilation": conv(args.get("dilation", 1), 1),
        "groups": int(args.get("groups", 1)),
    }
    if transpose:
        out["output_padding"] = conv(args.get("output_padding", 0), 0)
    return out


def op_conv(two_d, transpose):
    def run(args, ins):
        x, w, *bias = ins
        need(not bias or transpose, "a bias only on the transposed convolutions")
        kw = conv_args(args, two_d, transpose)
        if not two_d:
            need(x.ndim == 3 and w.ndim == 3, "conv1d needs rank-3 input and kernel")
            x4, w4 = x[:, :, None, :], w[:, :, None, :]
        else:
            x4, w4 = x, w
        fn = conv_transpose2d if transpose else conv2d

        def f(a, b):
            out = fn(a, b, **kw)
            return out if two_d else out[:, :, 0, :]

        out = f(x4, w4)
        if bias:
            # out[:, o, ...] += bias[o]; its gradient sums g over every other dimension
            (b,) = bias
            need(b.shape == (out.shape[1],), f"bias {b.shape} for {out.shape[1]} channels")
            out = out + b.reshape(1, -1, *[1] * (out.ndim - 2))

        def vjp(g):
            gx = linear_vjp(lambda e: f(e, w4), x4.shape, g).reshape(x.shape)
            gw = linear_vjp(lambda e: f(x4, e), w4.shape, g).reshape(w.shape)
            axes = tuple(i for i in range(g.ndim) if i != 1)
            return [gx, gw] + ([np.sum(g, axis=axes)] if bias else [])

        return out, vjp

    return run


def pool_args(args, two_d):
    """(kernel, stride, padding, dilation) pairs of a pooling as written (a 1-D op's as
    [1, v]: a height-1 window over [b, c, 1, l]) and its ceil_mode."""

    def conv(v, height):
        return pair(v) if two_d else (height, int(v))

    kernel = conv(args["kernel"], 1)
    stride = conv(args["stride"], 1) if "stride" in args else kernel
    padding = conv(args.get("padding", 0), 0)
    return kernel, stride, padding, conv(args.get("dilation", 1), 1), bool(args.get("ceil_mode"))


def op_max_pool(two_d):
    def run(args, ins):
        (x,) = ins
        kernel, stride, padding, dilation, ceil_mode = pool_args(args, two_d)
        x4 = x if two_d else x[:, :, None, :]
        out, arg = max_pool2d(x4, kernel, stride, padding, dilation, ceil_mode)

        def vjp(g):
            gx = np.zeros(x.size)
            np.add.at(gx, arg.ravel(), g.ravel())
            return [gx.reshape(x.shape)]

        return (out if two_d else out[:, :, 0, :]), vjp

    return run


def op_avg_pool(two_d):
    def run(args, ins):
        (x,) = ins
        kernel, stride, padding, dilation, ceil_mode = pool_args(args, two_d)
        need(dilation == (1, 1), "average pooling has no dilation")
        count = bool(args.get("count_include_pad", True))

        def f(e):
            y = avg_pool2d(e if two_d else e[:, :, None, :], kernel, stride, padding, count,
                           ceil_mode)  # fmt: skip
            return y if two_d else y[:, :, 0, :]

        return f(x), lambda g: [linear_vjp(f, x.shape, g)]

    return run


def op_pad(args, ins):
    """Zero padding: ``padding`` holds [before, after] for each of the last dimensions."""
    (x,) = ins
    pairs = [tuple(int(v) for v in p) for p in args["padding"]]
    need(len(pairs) <= x.ndim, "pad: more pairs than dimensions")
    widths = [(0, 0)] * (x.ndim - len(pairs)) + pairs
    inner = tuple(slice(a, a + n) for (a, _), n in zip(widths, x.shape, strict=True))
    return np.pad(x, widths), lambda g: [g[inner]]


def check_index(idx, size, what):
    need(np.all(idx >= 0) and np.all(idx < size), f"{what} index out of range 0..{size - 1}")


def op_embedding(args, ins):
    idx, w = ins
    need(w.ndim == 2, "embedding weight must be [v, d]")
    check_index(idx, w.shape[0], "embedding")
    ii = idx.astype(int)

    def vjp(g):
        gw = np.zeros_like(w)
        np.add.at(gw, ii.ravel(), g.reshape(-1, w.shape[1]))  # repeated rows add
        return [None, gw]

    return w[ii], vjp


def op_index_select(args, ins):
    x, idx = ins
    need(idx.ndim == 1, "index_select index must be 1-D")
    d = norm_dim(args["dim"], x.ndim)
    check_index(idx, x.shape[d], "index_select")
    ii = idx.astype(int)

    def vjp(g):
        gx = np.zeros_like(x)
        for k, i in enumerate(ii):  # repeated indices add
            src = np.take(g, [k], axis=d)
            sl = [slice(None)] * x.ndim
            sl[d] = slice(i, i + 1)
            gx[tuple(sl)] += src
        return [gx, None]

    return np.take(x, ii, axis=d), vjp


def op_gather(args, ins):
    x, idx = ins
    d = norm_dim(args["dim"], x.ndim)
    need(idx.ndim == x.ndim, "gather index must have the input's rank")
    need(
        all(idx.shape[k] <= x.shape[k] for k in range(x.ndim) if k != d),
        "gather index larger than the input off the gathered dimension",
    )
    check_index(idx, x.shape[d], "gather")
    ii = idx.astype(int)
    sub = x[tuple(slice(0, n) if k != d else slice(None) for k, n in enumerate(idx.shape))]

    def vjp(g):
        gx = np.zeros_like(x)
        grid = list(np.indices(idx.shape))
        grid[d] = ii
        np.add.at(gx, tuple(grid), g)
        return [gx, None]

    return np.take_along_axis(sub, ii, axis=d), vjp


def _scatter_grid(args, x, idx, src, op):
    d = norm_dim(args["dim"], x.ndim)
    need(idx.shape == src.shape, f"{op} index must have src's shape")
    need(idx.ndim == x.ndim, f"{op} index must have the input's rank")
    need(
        all(idx.shape[k] <= x.shape[k] for k in range(x.ndim) if k != d),
        f"{op} index larger than the input off the scattered dimension",
    )
    check_index(idx, x.shape[d], op)
    grid = list(np.indices(idx.shape))
    grid[d] = idx.astype(int)
    return tuple(grid)


def op_scatter(add: bool):
    """scatter_add (add: x + src at the indexed places) or scatter (write src there; the
    places must be distinct)."""

    def op(args, ins):
        x, idx, src = ins
        grid = _scatter_grid(args, x, idx, src, "scatter_add" if add else "scatter")
        out = x.copy()
        if add:
            np.add.at(out, grid, src)
        else:
            flat = np.ravel_multi_index(grid, x.shape).ravel()
            need(len(set(flat.tolist())) == flat.size, "scatter writes one place twice")
            out[grid] = src

        def vjp(g):
            gx = g.copy()
            if not add:
                gx[grid] = 0.0
            return [gx, None, g[grid]]

        return out, vjp

    return op


def op_index_add(args, ins):
    x, idx, src = ins
    d = norm_dim(args["dim"], x.ndim)
    need(idx.ndim == 1, "index_add index must be 1-D")
    want = (*x.shape[:d], idx.shape[0], *x.shape[d + 1 :])
    need(src.shape == want, "index_add src must have x's shape with dim's size len(index)")
    check_index(idx, x.shape[d], "index_add")
    ii = idx.astype(int)
    out = x.copy()
    np.add.at(np.moveaxis(out, d, 0), ii, np.moveaxis(src, d, 0))
    return out, lambda g: [g.copy(), None, np.take(g, ii, axis=d)]


def op_index_put(args, ins):
    x, idx, vals = ins
    acc = args.get("accumulate", False)
    need(x.ndim >= 1 and idx.ndim == 1, "index_put takes a 1-D index into dimension 0")
    need(vals.shape == (idx.shape[0], *x.shape[1:]), "index_put values shape")
    check_index(idx, x.shape[0], "index_put")
    ii = idx.astype(int)
    out = x.copy()
    if acc:
        np.add.at(out, ii, vals)
    else:
        need(len(set(ii.tolist())) == ii.size, "index_put replaces one row twice")
        out[ii] = vals

    def vjp(g):
        gx = g.copy()
        if not acc:
            gx[ii] = 0.0
        return [gx, None, g[ii]]

    return out, vjp


def reduce_loss(per, reduction, count):
    """(value, scale of the incoming gradient) for a loss reduction."""
    if reduction == "none":
        return per, None
    total = np.sum(per)
    return (np.array(total / count) if reduction == "mean" else np.array(total)), (
        1.0 / count if reduction == "mean" else 1.0
    )


def op_nll_like(log_softmax_first):
    def run(args, ins):
        x, t = ins
        need(x.ndim == 2 and t.ndim == 1 and t.shape[0] == x.shape[0], "loss shapes")
        check_index(t, x.shape[1], "target")
        tt = t.astype(int)
        lp = np.log(softmax_of(x, 1)) if log_softmax_first else x
        n = x.shape[0]
        per = -lp[np.arange(n), tt]
        red = args.get("reduction", "mean")
        out, scale = reduce_loss(per, red, n)

        def vjp(g):
            gs = g if scale is None else np.full(n, float(g) * scale)
            onehot = np.zeros_like(x)
            onehot[np.arange(n), tt] = 1.0
            if log_softmax_first:
                return [(softmax_of(x, 1) - onehot) * gs[:, None], None]
            return [-onehot * gs[:, None], None]

        return out, vjp

    return run


def op_mse(args, ins):
    a, b = ins
    need(a.shape == b.shape, "mse of unequal shapes")
    per = (a - b) ** 2
    red = args.get("reduction", "mean")
    out, scale = reduce_loss(per, red, a.size)

    def vjp(g):
        gs = g if scale is None else float(g) * scale
        d = 2 * (a - b) * gs
        return [d, -d]

    return out, vjp


OPS: dict[str, Callable] = {
    "sum": op_reduce("sum"),
    "mean": op_reduce("mean"),
    "max": op_reduce("max"),
    "min": op_reduce("min"),
    "argmax": op_arg("argmax"),
    "argmin": op_arg("argmin"),
    "sort": op_sort,
    "argsort": op_argsort,
    "relu": unary(lambda x, a: np.maximum(x, 0), lambda x, y, a: (x > 0).astype(float)),
    "abs": unary(lambda x, a: np.abs(x), lambda x, y, a: np.sign(x)),
    "sigmoid": unary(lambda x, a: sigmoid(x), lambda x, y, a: y * (1 - y)),
    "tanh": unary(lambda x, a: np.tanh(x), lambda x, y, a: 1 - y * y),
    "silu": unary(
        lambda x, a: x * sigmoid(x), lambda x, y, a: sigmoid(x) * (1 + x * (1 - sigmoid(x)))
    ),
    "gelu": unary(gelu, gelu_grad),
    "elu": unary(elu, elu_grad),
    "exp": unary(lambda x, a: np.exp(x), lambda x, y, a: y),
    "log": unary(lambda x, a: np.log(x), lambda x, y, a: 1 / x),
    "sqrt": unary(lambda x, a: np.sqrt(x), lambda x, y, a: 1 / (2 * y)),
    "softmax": op_softmax,
    "rms_norm": op_rms_norm,
    "log_softmax": op_log_softmax,
    "add": binary(lambda a, b: a + b, lambda a, b, g: g, lambda a, b, g: g),
    "sub": binary(lambda a, b: a - b, lambda a, b, g: g, lambda a, b, g: -g),
    "mul": binary(lambda a, b: a * b, lambda a, b, g: g * b, lambda a, b, g: g * a),
    "div": binary(lambda a, b: a / b, lambda a, b, g: g / b, lambda a, b, g: -g * a / (b * b)),
    "maximum": binary(
        np.maximum,
        lambda a, b, g: g * ((a > b) + 0.5 * (a == b)),
        lambda a, b, g: g * ((b > a) + 0.5 * (a == b)),
    ),
    "minimum": binary(
        np.minimum,
        lambda a, b, g: g * ((a < b) + 0.5 * (a == b)),
        lambda a, b, g: g * ((b < a) + 0.5 * (a == b)),
    ),
    "matmul": op_matmul,
    "transpose": op_layout("transpose"),
    "reshape": op_layout("reshape"),
    "unsqueeze": op_layout("unsqueeze"),
    "contiguous": op_layout("contiguous"),
    "narrow": op_layout("narrow"),
    "conv1d": op_conv(False, False),
    "conv2d": op_conv(True, False),
    "conv_transpose1d": op_conv(False, True),
    "conv_transpose2d": op_conv(True, True),
    "max_pool1d": op_max_pool(False),
    "max_pool2d": op_max_pool(True),
    "avg_pool1d": op_avg_pool(False),
    "avg_pool2d": op_avg_pool(True),
    "pad": op_pad,
    "embedding": op_embedding,
    "index_select": op_index_select,
    "gather": op_gather,
    "scatter_add": op_scatter(True),
    "scatter": op_scatter(False),
    "index_add": op_index_add,
    "index_put": op_index_put,
    "cross_entropy": op_nll_like(True),
    "nll": op_nll_like(False),
    "mse": op_mse,
}
#: Ops that sum products (their partial sums must stay exact in half precision).
ACCUMULATING = {"sum", "mean", "matmul", "conv1d", "conv2d", "conv_transpose1d"}
ACCUMULATING |= {"conv_transpose2d"}


# ----------------------------------------------------------------------------- inputs


def build_input(spec) -> tuple[np.ndarray, bool, bool]:
    """(values, requires_grad, is_int64) of one input as the v2 format writes it."""
    if "values" in spec:
        v = np.array(spec["values"], dtype=np.float64)
        if "shape" in spec:
            v = v.reshape(spec["shape"])
    elif "arange" in spec:
        a = spec["arange"]
        n = int(np.prod(spec["shape"]))
        v = (a.get("start", 0) + a.get("scale", 1) * np.arange(n, dtype=np.float64)).reshape(
            spec["shape"]
        )
    elif "ones" in spec:
        v = np.ones(spec["ones"])
    else:
        v = np.zeros(spec["zeros"])
    is_int = spec.get("dtype", "float") == "int64"
    if is_int:
        assert np.all(v == np.round(v)), "int64 input with a fraction"
    return v, bool(spec.get("requires_grad", False)), is_int


# ----------------------------------------------------------------------------- a case


def step_parts(step: dict) -> tuple[str, dict, list[str], str]:
    ((name, body),) = step.items()
    args = {k: v for k, v in body.items() if k not in ("in", "out")}
    ins = body["in"] if isinstance(body["in"], list) else [body["in"]]
    return name, args, ins, body["out"]


def backward_pass(case: dict, env: dict, dtype: str) -> tuple[float | None, dict]:
    """One forward and backward pass of ``case`` from the tensors ``env`` (updated in place
    with every step's output): the loss (None without one) and the gradient of every name
    it reaches."""
    rnd = ROUNDERS[dtype]
    tape = []
    for step in case["steps"]:
        name, args, ins, out = step_parts(step)
        vals = [env[i] for i in ins]
        y, vjp = OPS[name](args, vals)
        if dtype in HALF_INTEGER_LIMIT and name in ACCUMULATING:
            # the sum behind a mean: its partial sums are what must stay exact
            bound_op = OPS["sum" if name == "mean" else name]
            bound = bound_op(args, [np.abs(v) for v in vals])[0]
            limit = HALF_INTEGER_LIMIT[dtype]
            assert np.all(bound == np.round(bound)) and np.max(bound) <= limit, (
                f"{name}: partial sums up to {np.max(bound)} are not exact in {dtype}"
            )
        env[out] = y if vjp is None else rnd(y)
        tape.append((ins, out, vjp))
    grads: dict[str, np.ndarray] = {}
    loss = None
    if case.get("loss") is not None:
        terms = case["loss"] if isinstance(case["loss"], list) else [case["loss"]]
        loss = 0.0
        for term in terms:
            ((kind, arg),) = term.items()
            if kind == "sum":
                loss += np.sum(env[arg])
                seed = np.ones_like(env[arg])
                name = arg
            elif kind == "sum_squares":
                loss += np.sum(env[arg] ** 2)
                seed = 2 * env[arg]
                name = arg
            else:
                name, w = arg
                assert env[name].shape == env[w].shape, "weighted_sum shapes"
                loss += np.sum(env[name] * env[w])
                seed = env[w]
            grads[name] = grads.get(name, 0) + seed
        for ins, out, vjp in reversed(tape):
            if out not in grads or vjp is None:
                continue
            for i, gi in zip(ins, vjp(grads[out]), strict=True):
                if gi is not None:
                    grads[i] = rnd(grads.get(i, 0) + gi)
    return loss, grads


def transform_grads(transforms: list, grads: dict[str, np.ndarray], rnd) -> None:
    """The gradient transforms of an optimizer's ``grad`` list, in order, in place, as
    PyTorch documents them: ``scale`` (g·s), ``clip_norm`` (torch.nn.utils.clip_grad_norm_:
    N the norm of the per-gradient norms, c = min(max_norm·(N + 1e-6)⁻¹, 1)),
    ``clip_value`` (clamp to [−v, v]) and ``replace`` (the given values)."""
    for item in transforms:
        ((kind, arg),) = item.items()
        if kind == "scale":
            for k in grads:
                grads[k] = rnd(grads[k] * arg)
        elif kind == "clip_value":
            for k in grads:
                grads[k] = np.clip(grads[k], -arg, arg)
        elif kind == "clip_norm":
            norms = [rnd(np.sqrt(np.sum(g * g))) for g in grads.values()]
            total = rnd(np.sqrt(np.sum(np.square(norms))))
            coef = min(rnd(rnd(1 / rnd(total + 1e-6)) * arg), 1.0)
            for k in grads:
                grads[k] = rnd(grads[k] * coef)
        else:
            for k, v in arg.items():
                shape = grads[k].shape
                grads[k] = rnd(expand_exact(v, shape, f"replace {k}") + np.zeros(shape))


def run_case(inputs: dict, case: dict, dtype: str) -> dict[str, np.ndarray]:
    """Every quantity of ``case`` computed with rounding ``dtype`` after each operation;
    with ``accumulate`` k > 1 the loss and forward values of the k micro-steps stacked, the
    gradients summed over them (then the ``grad`` transforms); everything stacked along a
    leading axis for an optimizer loop of more than one step."""
    rnd = ROUNDERS[dtype]
    opt_spec = dict(case.get("optimizer") or {})
    n_steps = int(opt_spec.pop("steps", 1))
    micro = int(opt_spec.pop("accumulate", 1))
    bound = opt_spec.pop("micro_batches", {})
    transforms = opt_spec.pop("grad", [])
    ((opt_name, hp),) = opt_spec.items() if opt_spec else ((None, {}),)
    params = {k: rnd(v) for k, (v, rg, is_int) in inputs.items() if rg}
    state: dict[str, dict[str, np.ndarray]] = {k: {} for k in params}
    records: dict[str, list[np.ndarray]] = {q: [] for q in case["compare"]}
    for t in range(1, n_steps + 1):
        per_micro: dict[str, list[np.ndarray]] = {}
        acc: dict[str, np.ndarray] = {k: np.zeros_like(v) for k, v in params.items()}
        loss = None
        for j in range(micro):
            env = {}
            for k, (v, rg, is_int) in inputs.items():
                env[k] = params[k] if rg else (v if is_int else rnd(v))
            for name, source in bound.items():
                env[name] = env[source][(t - 1) * micro + j]
            loss, grads = backward_pass(case, env, dtype)
            for k in params:
                acc[k] = rnd(acc[k] + np.asarray(grads.get(k, np.zeros_like(params[k]))))
            for q in case["compare"]:
                if q == "loss" or "." not in q:
                    value = (
                        (None if loss is None else rnd(np.array(loss))) if q == "loss" else env[q]
                    )
                    per_micro.setdefault(q, []).append(np.asarray(value))
        transform_grads(transforms, acc, rnd)
        got = {q: (v[0] if micro == 1 else np.stack(v)) for q, v in per_micro.items()}
        for k in params:
            got[f"{k}.grad"] = acc[k]
        if opt_name is not None:
            for k in params:
                params[k] = optimizer_step(
                    opt_name, hp, t, params[k], got[f"{k}.grad"], state[k], rnd
                )
                got[f"{k}.after_step"] = params[k]
                for slot, v in state[k].items():
                    got[f"{k}.{slot}"] = v
        for q in case["compare"]:
            records[q].append(np.asarray(got[q]))
    if n_steps == 1:
        return {q: v[0] for q, v in records.items()}
    return {q: np.stack(v) for q, v in records.items()}


def optimizer_step(name, hp, t, p, grad, st, rnd):
    """One step of PyTorch's SGD / Adam / AdamW as documented (torch.optim, 2.15)."""
    lr = hp["lr"]
    wd = hp.get("weight_decay", 0.0)
    if name == "sgd":
        mu, damp, nesterov = hp.get("momentum", 0), hp.get("dampening", 0), hp.get("nesterov")
        g = rnd(grad + wd * p)
        if mu != 0:
            # the first buffer is the gradient itself, undampened
            b = g.copy() if t == 1 else rnd(mu * st["momentum_buffer"] + (1 - damp) * g)
            st["momentum_buffer"] = b
            g = rnd(g + mu * b) if nesterov else b
        return rnd(p - lr * g)
    b1, b2 = hp["betas"]
    eps = hp["eps"]
    if name == "adamw":
        p = rnd(p * (1 - lr * wd))
        g = grad
    else:
        g = rnd(grad + wd * p)
    m = rnd(b1 * st.get("exp_avg", 0) + (1 - b1) * g)
    v = rnd(b2 * st.get("exp_avg_sq", 0) + (1 - b2) * g * g)
    st["exp_avg"], st["exp_avg_sq"] = m, v
    denom = rnd(rnd(np.sqrt(v)) / math.sqrt(1 - b2**t) + eps)
    return rnd(p - (lr / (1 - b1**t)) * rnd(m / denom))


# ----------------------------------------------------------------------------- checks


def expand_exact(value, shape: tuple[int, ...], where: str) -> np.ndarray:
    """An exact entry as an array of ``shape``, asserting the v2 shape rules."""
    if isinstance(value, dict):
        assert set(value) == {"fill"}, f"{where}: only {{fill: v}} is a mapping"
        return np.full(shape, float(value["fill"]))
    if isinstance(value, list):
        arr = np.array(value, dtype=np.float64)
        assert arr.shape == shape, f"{where}: exact has shape {arr.shape}, quantity {shape}"
        return arr
    assert int(np.prod(shape)) == 1, f"{where}: one number for a quantity of shape {shape}"
    return np.full(shape, float(value))


def yaml_values(v: np.ndarray) -> str:
    """Values as a nested flow list, integers without a fraction (for ``--print``)."""

    def one(x):
        if isinstance(x, list):
            return "[" + ", ".join(one(e) for e in x) + "]"
        return str(int(x)) if float(x).is_integer() else repr(float(x))

    return one(v.tolist())


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def half_exactness(inputs: dict, case: dict, got: dict[str, np.ndarray]) -> str:
    """For a file not meant for half precision: which half dtypes its exact values also
    hold in (information for the reader of a half-precision run; not asserted)."""
    ok = []
    for dt in HALF_INTEGER_LIMIT:
        try:
            rounded = run_case(inputs, case, dt)
        except AssertionError:
            continue
        if all(same(rounded[q], got[q]) for q in case["exact"]):
            ok.append(dt)
    return f"; also {', '.join(ok)}" if ok else "; not in f16/bf16"


def check_file(path: Path, show: bool) -> list[str]:
    """Check one probe file; returns report lines (raises AssertionError on a failure)."""
    text = path.read_text()
    assert text.startswith("# "), f"{path.name}: the first line is not a comment"
    doc = yaml.safe_load(text)
    half = path.name in HALF_FILES
    inputs = {k: build_input(v) for k, v in doc["inputs"].items()}
    file_tol = doc.get("tolerance")
    lines = []
    for cname, case in doc["cases"].items():
        where = f"{path.name}:{cname}"
        if case.get("expect") == "error":
            try:
                run_case(inputs, case, "f64")
            except Refused as e:
                lines.append(f"{where}: refused as expected ({e})")
                continue
            raise AssertionError(f"{where}: expect: error, but the steps ran")
        got = run_case(inputs, case, "f64")
        exact = case.get("exact") or {}
        if show:
            for q, v in got.items():
                print(f"{where} {q} {list(v.shape)}: {yaml_values(v)}")
        assert set(exact) <= set(case["compare"]), f"{where}: exact of an uncompared quantity"
        tol = case.get("tolerance") or file_tol
        loose = [q for q in case["compare"] if q not in exact]
        assert show or not loose or tol, (
            f"{where}: {loose} have neither exact values nor a tolerance"
        )
        checked = []
        for q, value in exact.items():
            want = expand_exact(value, got[q].shape, f"{where} {q}")
            assert same(got[q], want), f"{where} {q}: exact {want.tolist()} != {got[q].tolist()}"
            checked.append(q)
        dtypes = ["f32"] + (["f16", "bf16"] if half else [])
        for dt in dtypes if exact else []:
            rounded = run_case(inputs, case, dt)
            for q in exact:
                assert same(rounded[q], got[q]), (
                    f"{where} {q}: not exact in {dt}: {rounded[q].tolist()} != {got[q].tolist()}"
                )
        half_note = "" if half or not exact else half_exactness(inputs, case, got)
        msg = f"{where}: exact {checked} (= float64; exact in {', '.join(dtypes)}{half_note})"
        if not exact:
            msg = f"{where}: no exact values"
        if loose:
            msg += f"; vs PyTorch with tolerance {tol}: {loose}"
        lines.append(msg)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--print", dest="show", action="store_true")
    args = parser.parse_args(argv)
    extra = HERE.parents[2] / "probes" / "softmax_transposed.yaml"
    files = args.files or [*sorted(HERE.glob("*.yaml")), extra]
    for path in files:
        for line in check_file(path, args.show):
            print(line)
    print(f"OK: {len(files)} files, every exact value recomputed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
