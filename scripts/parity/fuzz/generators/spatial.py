"""Generators of the spatial ops: convolutions and transposed convolutions (1-D and 2-D),
pooling (max and average, 1-D and 2-D), ``pad`` and nearest upsampling.

Arguments come from PyTorch's whole valid domain at these sizes: every stride, padding and
dilation 1–3 (a 2-D op's as one integer or a per-axis pair), groups 1 or 2, a transposed
convolution's ``output_padding`` up to its limit max(stride, dilation) − 1 and an optional
bias, pooling's ``ceil_mode``, max pooling's dilation, average pooling's
``count_include_pad``, padding up to half the kernel, and ``pad``'s asymmetric [before,
after] pairs. ``probe_shapes.infer`` refuses what PyTorch refuses (a draw is then
redrawn)."""

from __future__ import annotations

from typing import Any

from parity.fuzz.generators.common import d


def conv(rng, spatial: int, transpose: bool):
    """``[b, c_in, l…]`` and a kernel (``[c_out, c_in/g, k…]``, transposed ``[c_in,
    c_out/g, k…]`` with an optional bias ``[c_out]``); stride, padding, dilation 1–3 (0–2
    for padding), groups 1 or 2, output_padding 0 … max(stride, dilation) − 1."""
    g = int(rng.choice([1, 1, 1, 2]))
    b, cin, cout = d(rng, 1, 3), g * d(rng, 1, 3), g * d(rng, 1, 3)
    ks = [d(rng, 1, 4) for _ in range(spatial)]
    ls = [d(rng, 1, 6) for _ in range(spatial)]
    per_axis = spatial == 2 and rng.random() < 0.25
    args: dict[str, Any] = {}
    for name, lo, hi in (("stride", 1, 3), ("padding", 0, 2), ("dilation", 1, 3)):
        args[name] = [d(rng, lo, hi), d(rng, lo, hi)] if per_axis else d(rng, lo, hi)
    args["groups"] = g
    if not transpose:
        return [[b, cin, *ls], [cout, cin // g, *ks]], args
    stride, dil = args["stride"], args["dilation"]
    if per_axis:
        args["output_padding"] = [
            d(rng, 0, max(s, t) - 1) for s, t in zip(stride, dil, strict=True)
        ]
    else:
        args["output_padding"] = d(rng, 0, max(stride, dil) - 1)
    shapes = [[b, cin, *ls], [cin, cout // g, *ks]]
    if rng.random() < 0.5:
        shapes.append([cout])
    return shapes, args


def pool(rng, spatial: int, kind: str):
    """``[b, c, l…]`` with kernel 1–3 (a 2-D one square or not), stride 1–3, padding up to
    half the kernel, ``ceil_mode``; max pooling a dilation 1–3, average pooling
    ``count_include_pad``."""
    x = [d(rng, 1, 3), d(rng, 1, 3), *(d(rng) for _ in range(spatial))]
    per_axis = spatial == 2 and rng.random() < 0.3
    n = 2 if per_axis else 1
    kernel = [d(rng, 1, 3) for _ in range(n)]
    args: dict[str, Any] = {
        "kernel": kernel if per_axis else kernel[0],
        "stride": [d(rng, 1, 3) for _ in range(n)] if per_axis else d(rng, 1, 3),
        "padding": [d(rng, 0, k // 2) for k in kernel] if per_axis else d(rng, 0, kernel[0] // 2),
        "ceil_mode": bool(rng.random() < 0.5),
    }
    if kind == "max":
        args["dilation"] = [d(rng, 1, 3) for _ in range(n)] if per_axis else d(rng, 1, 3)
    else:
        args["count_include_pad"] = bool(rng.random() < 0.5)
    return [x], args


def pad(rng):
    """Zero padding of the last 1 … rank dimensions of a rank 1–4 input, each side 0–2
    (asymmetric)."""
    x = [d(rng) for _ in range(d(rng, 1, 4))]
    pairs = [[d(rng, 0, 2), d(rng, 0, 2)] for _ in range(d(rng, 1, len(x)))]
    return [x], {"padding": pairs}


def upsample1d(rng):
    """``[b, c, l]`` to a random size 1–6."""
    return [[d(rng, 1, 3), d(rng, 1, 3), d(rng)]], {"size": d(rng)}


def upsample2d(rng):
    """``[b, c, h, w]`` to a random size, each 1–6."""
    return [[d(rng, 1, 3), d(rng, 1, 3), d(rng), d(rng)]], {"size": [d(rng), d(rng)]}


#: op → generator.
SPATIAL = {
    "conv1d": lambda rng: conv(rng, 1, False),
    "conv2d": lambda rng: conv(rng, 2, False),
    "conv_transpose1d": lambda rng: conv(rng, 1, True),
    "conv_transpose2d": lambda rng: conv(rng, 2, True),
    "max_pool1d": lambda rng: pool(rng, 1, "max"),
    "max_pool2d": lambda rng: pool(rng, 2, "max"),
    "avg_pool1d": lambda rng: pool(rng, 1, "avg"),
    "avg_pool2d": lambda rng: pool(rng, 2, "avg"),
    "pad": pad,
    "upsample_nearest1d": upsample1d,
    "upsample_nearest2d": upsample2d,
}
