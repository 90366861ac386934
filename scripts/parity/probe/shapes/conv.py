"""Shape rules of the spatial ops of the probe language: convolutions, transposed
convolutions, pooling and nearest upsampling, in 1-D and 2-D, with PyTorch 2.15's output
sizes (padding, stride, dilation, output padding, groups, ceil mode), and ``pad`` (zero
padding, the way to pad asymmetrically before them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parity.probe.shapes.common import Shape, ShapeError, check_rank

# Each: f(args, shapes, values) -> output shape. ``values`` holds, per input, its flat
# values when known (a probe input), else None. Kinds are checked by ``shapes.infer``.


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
    check_rank(x, 2 + spatial, f"{op}'s input [b, c_in, {'l' if spatial == 1 else 'h, w'}]")
    check_rank(w, 2 + spatial, f"{op}'s kernel [c_out, c_in/groups, k...]")
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
    x, w, *bias = shapes
    check_rank(x, 2 + spatial, f"{op}'s input [b, c_in, {'l' if spatial == 1 else 'h, w'}]")
    check_rank(w, 2 + spatial, f"{op}'s kernel [c_in, c_out/groups, k...]")
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
    if bias and list(bias[0]) != [w[1] * g]:
        raise ShapeError(f"{op}'s bias must have shape [{w[1] * g}], got {list(bias[0])}")
    return [x[0], w[1] * g, *sizes]


def pool_size(size: int, k: int, pad: int, stride: int, dil: int, ceil_mode: bool) -> int:
    """PyTorch 2.15's pooling output size along one axis (``pooling_output_shape``):
    ⌊(size + 2·pad − dil·(k − 1) − 1 + (stride − 1 if ceil_mode)) / stride⌋ + 1, less one
    in ceil mode when the last window would start at or past ``size + pad`` (past the input
    and its left padding). May be below 1 (the caller refuses it)."""
    span = dil * (k - 1) + 1
    n = (size + 2 * pad - span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (n - 1) * stride >= size + pad:
        n -= 1
    return n


def _pool(op: str, spatial: int, args: Mapping, shapes: Sequence[Shape]) -> Shape:
    (x,) = shapes
    check_rank(x, 2 + spatial, f"{op}'s input [b, c, {'l' if spatial == 1 else 'h, w'}]")
    p = _pairs(args, spatial)
    ceil_mode = bool(args.get("ceil_mode", False))
    sizes = []
    for i in range(spatial):
        k, s, pad = p["kernel"][i], p["stride"][i], p["padding"][i]
        dil = p["dilation"][i] if "dilation" in p else 1
        if 2 * pad > k:
            raise ShapeError(f"padding {pad} must be at most half the kernel ({k})")
        span = dil * (k - 1) + 1
        n = pool_size(x[2 + i], k, pad, s, dil, ceil_mode)
        if x[2 + i] + 2 * pad < span or n < 1:
            raise ShapeError(
                f"the padded input ({x[2 + i]} + 2·{pad} along {_axis(spatial, i)}) is "
                f"smaller than the {'dilated ' if dil > 1 else ''}kernel ({span})"
            )
        sizes.append(n)
    return [*x[:2], *sizes]


def conv1d(args, shapes, values=None) -> Shape:
    """``[b, c_in, l]`` by ``[c_out, c_in/groups, k]`` → ``[b, c_out, l_out]``."""
    return _conv("conv1d", 1, args, shapes)


def conv2d(args, shapes, values=None) -> Shape:
    """``[b, c_in, h, w]`` by ``[c_out, c_in/groups, kh, kw]`` → ``[b, c_out, h', w']``."""
    return _conv("conv2d", 2, args, shapes)


def conv_transpose1d(args, shapes, values=None) -> Shape:
    """``[b, c_in, l]`` by ``[c_in, c_out/groups, k]`` (and a bias ``[c_out]``) →
    ``[b, c_out, l_out]``."""
    return _conv_transpose("conv_transpose1d", 1, args, shapes)


def conv_transpose2d(args, shapes, values=None) -> Shape:
    """``[b, c_in, h, w]`` by ``[c_in, c_out/groups, kh, kw]`` (and a bias ``[c_out]``) →
    ``[b, c_out, h', w']``."""
    return _conv_transpose("conv_transpose2d", 2, args, shapes)


def max_pool1d(args, shapes, values=None) -> Shape:
    """``[b, c, l]`` → ``[b, c, l_out]``, l_out = :func:`pool_size` (dilation, ceil_mode);
    padding at most half the kernel."""
    return _pool("max_pool1d", 1, args, shapes)


def max_pool2d(args, shapes, values=None) -> Shape:
    """``[b, c, h, w]`` → ``[b, c, h', w']``, each as max_pool1d's."""
    return _pool("max_pool2d", 2, args, shapes)


def avg_pool1d(args, shapes, values=None) -> Shape:
    """As :func:`max_pool1d` with dilation 1."""
    return _pool("avg_pool1d", 1, args, shapes)


def avg_pool2d(args, shapes, values=None) -> Shape:
    """As :func:`max_pool2d` with dilation 1."""
    return _pool("avg_pool2d", 2, args, shapes)


def pad(args, shapes, values=None) -> Shape:
    """Zero padding of the last ``len(padding)`` dimensions: each grows by before + after
    (``padding``: [before, after] per dimension, the last dimension last); at most the
    input's rank of them."""
    (x,) = shapes
    pairs = args["padding"]
    if len(pairs) > len(x):
        raise ShapeError(f"pad: {len(pairs)} [before, after] pairs for an input of rank {len(x)}")
    lead = len(x) - len(pairs)
    return [*x[:lead], *(n + a + b for n, (a, b) in zip(x[lead:], pairs, strict=True))]


def upsample_nearest1d(args, shapes, values=None) -> Shape:
    """``[b, c, l]`` → ``[b, c, size]``."""
    check_rank(shapes[0], 3, "upsample_nearest1d's input [b, c, l]")
    return [*shapes[0][:2], args["size"]]


def upsample_nearest2d(args, shapes, values=None) -> Shape:
    """``[b, c, h, w]`` → ``[b, c, size[0], size[1]]``."""
    check_rank(shapes[0], 4, "upsample_nearest2d's input [b, c, h, w]")
    return [*shapes[0][:2], *args["size"]]
