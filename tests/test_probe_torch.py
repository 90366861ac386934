"""The PyTorch probe interpreter (``parity.probe.torch``) on hand-built normalized probes.

Every expected value is computed here by hand or with plain numpy (never torch), from small
integer inputs, so the interpreter is checked against the semantics the probe language
names (``rust/parity-common/src/probe_spec/op.rs``), not against itself.
"""

from __future__ import annotations

import itertools
import logging
import math

import numpy as np
import pytest

from parity.probe import torch as probe_torch
from parity.probe.format import Probe

LOG = logging.getLogger("test")


# ----- normalized probes built by hand (the contract's form) -----------------------------


def inp(name, values, requires_grad=False, dtype="float"):
    """A normalized input from a nested list (or numpy array) of values."""
    arr = np.asarray(values, dtype=np.float64)
    return {
        "name": name,
        "dtype": dtype,
        "shape": list(arr.shape),
        "values": [float(v) for v in arr.reshape(-1)],
        "requires_grad": requires_grad,
    }


def step(out, inputs, op, **args):
    return {"out": out, "inputs": list(inputs), "op": {"name": op, **args}}


def case(name, steps, compare, loss=None, optimizer=None, optimizer_steps=1):
    return {
        "name": name,
        "note": "",
        "steps": steps,
        "loss": loss,
        "optimizer": optimizer,
        "optimizer_steps": optimizer_steps,
        "compare": compare,
        "exact": {},
        "known_bug": {},
        "expect": "values",
        "tolerance": None,
    }


def weighted(t, w):
    return [{"kind": "weighted_sum", "input": t, "weights": w}]


def total(t):
    return [{"kind": "sum", "input": t}]


def make_probe(inputs, cases, name="p"):
    spec = {
        "probe": name,
        "description": "hand-built",
        "tolerance": {"f16": 0.0, "bf16": 0.0, "f32": 0.0, "f64": 0.0},
        "inputs": inputs,
        "cases": cases,
    }
    return Probe(name, spec)


def run(probe, dtype="f64"):
    """Outcomes by (case, quantity)."""
    return {(o.case, o.quantity): o for o in probe_torch.run(probe, dtype, "cpu", 1, LOG)}


def ok(outcomes, q, case_name="c"):
    """The values of an ``ok`` outcome as an array of its shape."""
    o = outcomes[(case_name, q)]
    assert o.status == "ok", o
    assert o.values.dtype == np.float64
    return o.values.reshape(o.shape)


def one_op(op, args, inputs, compare, loss=None, dtype="f64", **kw):
    """Runs the single step ``y = op(inputs)`` in one case ``c``; an input called ``c``
    (loss weights) is not an input of the step."""
    names = [i["name"] for i in inputs if i["name"] != "c"]
    p = make_probe(inputs, [case("c", [step("y", names, op, **args)], compare, loss, **kw)])
    return run(p, dtype)


def close(got, want, tol=1e-12):
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ----- element-wise -----------------------------------------------------------------------

SQRT_2PI = math.sqrt(2 / math.pi)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x):
    u = SQRT_2PI * (x + 0.044715 * x**3)
    t = np.tanh(u)
    grad = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2PI * (1 + 3 * 0.044715 * x * x)
    return 0.5 * x * (1 + t), grad


def _gelu_erf(x):
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return x * cdf, cdf + x * phi


UNARY = {
    # op, arguments, inputs, (values, derivative) of x
    "sigmoid": ({}, [-2, -1, 0, 1, 2], lambda x: (_sig(x), _sig(x) * (1 - _sig(x)))),
    "tanh": ({}, [-2, -1, 0, 1, 2], lambda x: (np.tanh(x), 1 - np.tanh(x) ** 2)),
    "silu": (
        {},
        [-2, -1, 0, 1, 2],
        lambda x: (x * _sig(x), _sig(x) * (1 + x * (1 - _sig(x)))),
    ),
    "gelu": ({"approximate": "none"}, [-2, -1, 0, 1, 2], _gelu_erf),
    "gelu_tanh": ({"approximate": "tanh"}, [-2, -1, 0, 1, 2], _gelu_tanh),
    "elu": (
        {"alpha": 0.5},
        [-2, -1, 1, 2],
        lambda x: (np.where(x > 0, x, 0.5 * (np.exp(x) - 1)), np.where(x > 0, 1, 0.5 * np.exp(x))),
    ),
    "exp": ({}, [-2, -1, 0, 1, 2], lambda x: (np.exp(x), np.exp(x))),
    "log": ({}, [1, 2, 4, 8], lambda x: (np.log(x), 1 / x)),
    "sqrt": ({}, [1, 4, 9, 16], lambda x: (np.sqrt(x), 0.5 / np.sqrt(x))),
}


@pytest.mark.parametrize("key", list(UNARY))
def test_unary_values_and_gradient(key):
    args, xs, fn = UNARY[key]
    x = np.array(xs, dtype=np.float64)
    c = np.arange(1, len(xs) + 1, dtype=np.float64)
    r = one_op(
        key.removesuffix("_tanh"),
        args,
        [inp("x", x, True), inp("c", c)],
        ["y", "x.grad", "loss"],
        weighted("y", "c"),
    )
    value, deriv = fn(x)
    close(ok(r, "y"), value)
    close(ok(r, "x.grad"), c * deriv)
    close(ok(r, "loss"), np.sum(c * value))


def test_sub_and_div_values_and_gradients():
    a = np.array([[6.0, -4.0], [3.0, 8.0]])
    b = np.array([[2.0, 4.0], [-1.0, 16.0]])
    c = np.array([[1.0, 2.0], [3.0, 4.0]])
    for op, value, da, db in (
        ("sub", a - b, c, -c),
        ("div", [[3, -1], [-3, 0.5]], c / b, -c * a / (b * b)),
    ):
        r = one_op(
            op,
            {},
            [inp("a", a, True), inp("b", b, True), inp("c", c)],
            ["y", "a.grad", "b.grad"],
            weighted("y", "c"),
        )
        close(ok(r, "y"), value)
        close(ok(r, "a.grad"), da)
        close(ok(r, "b.grad"), db)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "mse"])
def test_unequal_shapes_are_a_framework_error_for_every_quantity(op):
    args = {"reduction": "sum"} if op == "mse" else {}
    r = one_op(
        op,
        args,
        [inp("a", [1.0, 2.0, 3.0], True), inp("b", [[1.0, 2.0, 3.0]], True)],
        ["y", "loss", "a.grad", "b.grad"],
        total("y"),
    )
    assert {o.status for o in r.values()} == {"framework-error"}
    assert all("shapes [3] and [1, 3] differ" in o.message for o in r.values())


def test_a_pytorch_shape_error_is_a_framework_error_for_every_quantity():
    r = one_op(
        "matmul",
        {},
        [inp("a", np.ones((2, 3)), True), inp("b", np.ones((2, 3)), True)],
        ["y", "loss", "a.grad", "b.grad"],
        total("y"),
    )
    assert {o.status for o in r.values()} == {"framework-error"}
    assert all(o.message.startswith("RuntimeError: ") for o in r.values())


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ((1, 2, 3), (4, 3, 2), "batch dimensions [1] and [4] differ"),
        ((3,), (3, 2), "ranks 1 and 2; both must be 2 or more"),
    ],
)
def test_matmul_neither_broadcasts_nor_takes_vectors(a, b, message):
    """The probe language's matmul has equal batch dimensions (broadcast_to says when one is
    broadcast, as candle needs): torch.matmul's broadcasting would hide a layout case."""
    r = one_op(
        "matmul", {}, [inp("a", np.ones(a), True), inp("b", np.ones(b), True)], ["y"], total("y")
    )
    y = r[("c", "y")]
    assert y.status == "framework-error" and message in y.message


def test_non_finite_inputs_pass_through():
    x = inp("x", [1.0, 2.0, 3.0, 4.0])
    x["values"] = [math.inf, "-inf", math.nan, -2.0]  # the runner JSON's strings too
    r = one_op("relu", {}, [x], ["y", "x"])
    y = ok(r, "y")
    assert y[0] == math.inf and y[1] == 0 and math.isnan(y[2]) and y[3] == 0
    assert ok(r, "x")[1] == -math.inf


# ----- reductions, arg-reductions, sorting -------------------------------------------------

TIES = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])


@pytest.mark.parametrize(
    ("op", "dims", "keepdim", "value", "grad"),
    [
        ("sum", None, False, 11.0, np.ones((2, 3))),
        ("sum", [1], True, [[7.0], [4.0]], np.ones((2, 3))),
        ("mean", [0], False, [1.5, 2.5, 1.5], np.full((2, 3), 0.5)),
        ("mean", None, True, [[11 / 6]], np.full((2, 3), 1 / 6)),
        # amax/amin: the gradient is shared equally among ties
        ("max", [1], False, [3.0, 2.0], [[0, 0.5, 0.5], [0.5, 0.5, 0]]),
        ("max", None, False, 3.0, [[0, 0.5, 0.5], [0, 0, 0]]),
        ("max", [0, 1], True, [[3.0]], [[0, 0.5, 0.5], [0, 0, 0]]),
        ("min", [-1], False, [1.0, 0.0], [[1, 0, 0], [0, 0, 1]]),
        ("min", [0], True, [[1.0, 2.0, 0.0]], [[1, 0, 0], [0, 1, 1]]),
    ],
)
def test_reductions_and_tied_gradients(op, dims, keepdim, value, grad):
    r = one_op(
        op, {"dims": dims, "keepdim": keepdim}, [inp("x", TIES, True)], ["y", "x.grad"], total("y")
    )
    close(ok(r, "y"), value)
    close(ok(r, "x.grad"), grad)


@pytest.mark.parametrize(
    ("op", "dim", "keepdim", "want"),
    [
        ("argmax", 1, False, [1, 0]),  # first index among ties
        ("argmax", -1, True, [[1], [0]]),
        ("argmax", 0, False, [1, 0, 0]),
        ("argmin", 1, False, [0, 2]),
        ("argmin", 0, True, [[0, 1, 1]]),
    ],
)
def test_arg_reductions_give_the_first_index_as_float64(op, dim, keepdim, want):
    r = one_op(op, {"dim": dim, "keepdim": keepdim}, [inp("x", TIES)], ["y"])
    got = ok(r, "y")
    assert got.tolist() == want  # integer quantities: exact


def test_sort_and_argsort_are_stable():
    x = np.array([3.0, 1.0, 2.0, 1.0, 3.0, 2.0])
    w = np.arange(1.0, 7.0)
    for descending, perm in (
        (False, np.argsort(x, kind="stable")),
        (True, np.argsort(-x, kind="stable")),
    ):
        assert perm.tolist() == ([1, 3, 2, 5, 0, 4] if not descending else [0, 4, 2, 5, 1, 3])
        args = {"dim": -1, "descending": descending}
        p = make_probe(
            [inp("x", x, True), inp("w", w)],
            [
                case(
                    "c",
                    [step("s", ["x"], "sort", **args), step("i", ["x"], "argsort", **args)],
                    ["s", "i", "x.grad"],
                    weighted("s", "w"),
                )
            ],
        )
        r = run(p)
        assert ok(r, "i").tolist() == perm.tolist()
        close(ok(r, "s"), x[perm])
        grad = np.zeros(6)
        grad[perm] = w  # sorted position k came from x[perm[k]]
        close(ok(r, "x.grad"), grad)


def test_sort_along_dim_zero():
    x = np.array([[2.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    r = one_op("argsort", {"dim": 0, "descending": True}, [inp("x", x)], ["y"])
    assert ok(r, "y").tolist() == [[0, 0], [1, 1], [2, 2]]


def test_log_softmax_values_and_gradient():
    x = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 2.0]])
    c = np.array([[1.0, 0.0, 2.0], [-1.0, 3.0, 1.0]])
    for dim in (-1, 0):
        r = one_op(
            "log_softmax",
            {"dim": dim},
            [inp("x", x, True), inp("c", c)],
            ["y", "x.grad"],
            weighted("y", "c"),
        )
        m = x.max(axis=dim, keepdims=True)
        lse = m + np.log(np.exp(x - m).sum(axis=dim, keepdims=True))
        close(ok(r, "y"), x - lse)
        soft = np.exp(x - lse)
        close(ok(r, "x.grad"), c - soft * c.sum(axis=dim, keepdims=True))


# ----- convolutions and pooling (numpy loops) ---------------------------------------------


def np_conv2d(x, w, stride, padding, dilation, groups):
    """PyTorch's conv2d (cross-correlation) with numpy loops."""
    b, _, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((b, cout, oh, ow))
    cout_g = cout // groups
    for n, o, i, j in itertools.product(range(b), range(cout), range(oh), range(ow)):
        g = o // cout_g
        for ci, p, q in itertools.product(range(cin_g), range(kh), range(kw)):
            out[n, o, i, j] += (
                xp[
                    n,
                    g * cin_g + ci,
                    i * stride[0] + p * dilation[0],
                    j * stride[1] + q * dilation[1],
                ]
                * w[o, ci, p, q]
            )
    return out


def np_conv_transpose2d(x, w, stride, padding, output_padding, dilation, groups):
    """PyTorch's conv_transpose2d (weight [c_in, c_out/groups, kh, kw]) by scattering."""
    b, cin, h, wd = x.shape
    _, cout_g, kh, kw = w.shape
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    out = np.zeros((b, cout_g * groups, oh, ow))
    cin_g = cin // groups
    for n, ci, i, j in itertools.product(range(b), range(cin), range(h), range(wd)):
        g = ci // cin_g
        for oc, p, q in itertools.product(range(cout_g), range(kh), range(kw)):
            r = i * stride[0] - padding[0] + p * dilation[0]
            s = j * stride[1] - padding[1] + q * dilation[1]
            if 0 <= r < oh and 0 <= s < ow:
                out[n, g * cout_g + oc, r, s] += x[n, ci, i, j] * w[ci, oc, p, q]
    return out


def linear_grad(f, arg, c):
    """The gradient of sum(c · f(arg)) for f linear in ``arg``: entry i is sum(c · f(eᵢ))."""
    grad = np.zeros(arg.shape)
    for idx in np.ndindex(arg.shape):
        e = np.zeros(arg.shape)
        e[idx] = 1.0
        grad[idx] = np.sum(c * f(e))
    return grad


def check_bilinear(op, args, x, w, f):
    """Values and both gradients of ``op(x, w)`` (linear in each) against numpy ``f``."""
    y = f(x, w)
    c = np.arange(1.0, y.size + 1).reshape(y.shape) * np.where(
        np.arange(y.size) % 2, -1, 1
    ).reshape(y.shape)
    r = one_op(
        op,
        args,
        [inp("x", x, True), inp("w", w, True), inp("c", c)],
        ["y", "x.grad", "w.grad", "loss"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), y)
    close(ok(r, "x.grad"), linear_grad(lambda e: f(e, w), x, c))
    close(ok(r, "w.grad"), linear_grad(lambda e: f(x, e), w, c))
    close(ok(r, "loss"), np.sum(c * y))


def test_conv2d_with_per_axis_arguments():
    x = np.arange(1.0, 2 * 4 * 5 * 6 + 1).reshape(2, 4, 5, 6) % 7 - 3
    w = np.arange(1.0, 6 * 2 * 2 * 3 + 1).reshape(6, 2, 2, 3) % 5 - 2
    args = {"stride": [2, 1], "padding": [1, 0], "dilation": [1, 2], "groups": 2}
    check_bilinear(
        "conv2d",
        args,
        x,
        w,
        lambda a, b: np_conv2d(a, b, (2, 1), (1, 0), (1, 2), 2),
    )


@pytest.mark.parametrize(
    "args",
    [
        {"stride": 2, "padding": 1, "output_padding": 1, "dilation": 1, "groups": 1},
        {"stride": 1, "padding": 0, "output_padding": 0, "dilation": 2, "groups": 2},
    ],
)
def test_conv_transpose1d(args):
    x = np.arange(1.0, 2 * 4 * 3 + 1).reshape(2, 4, 3) % 5 - 2
    w = np.arange(1.0, 4 * 2 * 3 + 1).reshape(4, 2, 3) % 4 - 1

    def f(a, b):
        # a 1-D transposed convolution is a 2-D one with height 1
        return np_conv_transpose2d(
            a[:, :, None, :],
            b[:, :, None, :],
            (1, args["stride"]),
            (0, args["padding"]),
            (0, args["output_padding"]),
            (1, args["dilation"]),
            args["groups"],
        )[:, :, 0, :]

    check_bilinear("conv_transpose1d", args, x, w, f)


def test_conv_transpose2d_with_per_axis_arguments():
    x = np.arange(1.0, 1 * 2 * 3 * 3 + 1).reshape(1, 2, 3, 3) % 4 - 1
    w = np.arange(1.0, 2 * 3 * 2 * 3 + 1).reshape(2, 3, 2, 3) % 5 - 2
    args = {
        "stride": [2, 1],
        "padding": [1, 0],
        "output_padding": [1, 0],
        "dilation": [1, 2],
        "groups": 1,
    }
    check_bilinear(
        "conv_transpose2d",
        args,
        x,
        w,
        lambda a, b: np_conv_transpose2d(a, b, (2, 1), (1, 0), (1, 0), (1, 2), 1),
    )


def np_pool2d(x, kernel, stride, padding, kind):
    """Max pooling (padding −∞) or average pooling (padding zeros counted) with loops; also
    the gradient of sum(c · pool(x)) as a function of c (max: to the window's maximum)."""
    b, ch, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2), constant_values=fill)
    oh = (h + 2 * padding[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * padding[1] - kernel[1]) // stride[1] + 1
    out = np.zeros((b, ch, oh, ow))
    where = {}
    for n, k, i, j in itertools.product(range(b), range(ch), range(oh), range(ow)):
        win = xp[
            n,
            k,
            i * stride[0] : i * stride[0] + kernel[0],
            j * stride[1] : j * stride[1] + kernel[1],
        ]
        if kind == "max":
            out[n, k, i, j] = win.max()
            p, q = np.unravel_index(np.argmax(win), win.shape)
            where[(n, k, i, j)] = [(i * stride[0] + p - padding[0], j * stride[1] + q - padding[1])]
        else:
            out[n, k, i, j] = win.sum() / (kernel[0] * kernel[1])
            where[(n, k, i, j)] = [
                (i * stride[0] + p - padding[0], j * stride[1] + q - padding[1])
                for p in range(kernel[0])
                for q in range(kernel[1])
            ]

    def grad(c):
        g = np.zeros(x.shape)
        for (n, k, i, j), cells in where.items():
            for r, s in cells:
                if 0 <= r < h and 0 <= s < w:
                    g[n, k, r, s] += c[n, k, i, j] / (1 if kind == "max" else len(cells))
        return g

    return out, grad


def _distinct(shape):
    """Distinct integers in a scrambled order (no ties inside a pooling window)."""
    n = math.prod(shape)
    perm = np.random.default_rng(0).permutation(n)
    return (perm - n // 2).astype(np.float64).reshape(shape)


@pytest.mark.parametrize(
    ("kind", "kernel", "stride", "padding"),
    [
        ("max", [2, 2], [2, 2], [0, 0]),
        ("max", [3, 2], [2, 1], [1, 1]),
        ("avg", [2, 2], [2, 2], [0, 0]),
        ("avg", [3, 2], [2, 1], [1, 1]),
    ],
)
def test_pool2d(kind, kernel, stride, padding):
    x = _distinct((2, 2, 5, 4))
    want, grad = np_pool2d(x, kernel, stride, padding, kind)
    c = np.arange(1.0, want.size + 1).reshape(want.shape)
    r = one_op(
        f"{kind}_pool2d",
        {"kernel": kernel, "stride": stride, "padding": padding},
        [inp("x", x, True), inp("c", c)],
        ["y", "x.grad"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), want)
    close(ok(r, "x.grad"), grad(c))


def test_max_pool1d_with_padding():
    x = _distinct((1, 2, 7))
    want, grad = np_pool2d(x[:, :, None, :], (1, 3), (1, 2), (0, 1), "max")
    want = want[:, :, 0, :]
    c = np.arange(1.0, want.size + 1).reshape(want.shape)
    r = one_op(
        "max_pool1d",
        {"kernel": 3, "stride": 2, "padding": 1},
        [inp("x", x, True), inp("c", c)],
        ["y", "x.grad"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), want)
    close(ok(r, "x.grad"), grad(c[:, :, None, :])[:, :, 0, :])


def test_conv_transpose_takes_a_bias():
    """y = conv_transpose1d(x, w) + bias per channel; the bias gradient sums the weights
    of its channel. x = [1, 2] (1 channel), w = [[1, 10], [2, 20]] as [1, 2, 2] (2 output
    channels), stride 2, bias [0.5, −1]."""
    x = np.array([[[1.0, 2.0]]])
    w = np.array([[[1.0, 10.0], [2.0, 20.0]]])
    b = np.array([0.5, -1.0])
    c = np.arange(1.0, 9.0).reshape(1, 2, 4)
    r = one_op(
        "conv_transpose1d",
        {"stride": 2, "padding": 0, "output_padding": 0, "dilation": 1, "groups": 1},
        [inp("x", x, True), inp("w", w, True), inp("b", b, True), inp("c", c)],
        ["y", "b.grad"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), [[[1.5, 10.5, 2.5, 20.5], [1, 19, 3, 39]]])
    close(ok(r, "b.grad"), [10, 26])


def test_pool_arguments_reach_pytorch():
    """dilation and ceil_mode (max), count_include_pad and ceil_mode (avg_pool1d); exact
    values by hand: x = 1..6, kernel 3, stride 2, padding 1, ceil_mode gives a fourth
    window [6, padding, past the end], whose divisor is 2 with the padding counted and 1
    without."""
    x = np.arange(1.0, 7.0).reshape(1, 1, 6)
    args = {"kernel": 3, "stride": 2, "padding": 1, "ceil_mode": True}
    r = one_op("avg_pool1d", {**args, "count_include_pad": True}, [inp("x", x, True)], ["y"])
    close(ok(r, "y"), [[[1, 3, 5, 3]]])
    r = one_op("avg_pool1d", {**args, "count_include_pad": False}, [inp("x", x, True)], ["y"])
    close(ok(r, "y"), [[[1.5, 3, 5, 6]]])
    # dilation 2: windows (0, 2, 4) and, in ceil mode, (3, 5, past the end)
    dil = {"kernel": 3, "stride": 3, "padding": 0, "dilation": 2}
    r = one_op("max_pool1d", dil, [inp("x", x, True)], ["y", "x.grad"], total("y"))
    close(ok(r, "y"), [[[5]]])
    r = one_op("max_pool1d", {**dil, "ceil_mode": True}, [inp("x", x, True)], ["y"])
    close(ok(r, "y"), [[[5, 6]]])


def test_pad_takes_pairs_last_dimension_last():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    r = one_op("pad", {"padding": [[1, 0], [0, 2]]}, [inp("x", x, True)], ["y", "x.grad"],
               total("y"))  # fmt: skip
    close(ok(r, "y"), [[0, 0, 0, 0], [1, 2, 0, 0], [3, 4, 0, 0]])
    close(ok(r, "x.grad"), np.ones((2, 2)))


# ----- indexing ---------------------------------------------------------------------------


def test_embedding_with_repeated_indices_adds_gradients():
    weight = np.arange(1.0, 13.0).reshape(4, 3)
    idx = np.array([[0, 2], [2, 2]])
    c = np.arange(1.0, 13.0).reshape(2, 2, 3)
    r = one_op(
        "embedding",
        {},
        [inp("i", idx, dtype="int64"), inp("weight", weight, True), inp("c", c)],
        ["y", "weight.grad"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), weight[idx])
    grad = np.zeros((4, 3))
    np.add.at(grad, idx, c)
    close(ok(r, "weight.grad"), grad)
    assert ok(r, "weight.grad")[2].tolist() == [4 + 7 + 10, 5 + 8 + 11, 6 + 9 + 12]


def test_index_select_with_repeated_index():
    x = np.arange(1.0, 13.0).reshape(3, 4)
    idx = np.array([3, 0, 3])
    c = np.arange(1.0, 10.0).reshape(3, 3)
    r = one_op(
        "index_select",
        {"dim": 1},
        [inp("x", x, True), inp("i", idx, dtype="int64"), inp("c", c)],
        ["y", "x.grad"],
        weighted("y", "c"),
    )
    close(ok(r, "y"), x[:, idx])
    grad = np.zeros((3, 4))
    np.add.at(grad, (slice(None), idx), c)
    close(ok(r, "x.grad"), grad)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_values_and_backward(dim):
    x = np.arange(1.0, 13.0).reshape(3, 4)
    idx = np.array([[2, 0, 1, 2], [2, 2, 0, 0]]) if dim == 0 else np.array([[3, 3], [0, 1], [2, 0]])
    c = np.arange(1.0, idx.size + 1).reshape(idx.shape)
    r = one_op(
        "gather",
        {"dim": dim},
        [inp("x", x, True), inp("i", idx, dtype="int64"), inp("c", c)],
        ["y", "x.grad"],
        weighted("y", "c"),
    )
    want = np.zeros(idx.shape)
    grad = np.zeros(x.shape)
    for a, b in np.ndindex(idx.shape):
        src = (idx[a, b], b) if dim == 0 else (a, idx[a, b])
        want[a, b] = x[src]
        grad[src] += c[a, b]
    close(ok(r, "y"), want)
    close(ok(r, "x.grad"), grad)


@pytest.mark.parametrize("op", ["scatter_add", "scatter"])
def test_scatter_values_and_gradients_of_target_and_source(op):
    x = np.arange(1.0, 13.0).reshape(3, 4)
    idx = np.array([[2, 0, 1, 2], [0, 2, 0, 1]])  # distinct places per column
    src = np.array([[1.0, -2.0, 3.0, 4.0], [5.0, 6.0, -7.0, 8.0]])
    c = np.arange(1.0, 13.0).reshape(3, 4) ** 2
    r = one_op(
        op,
        {"dim": 0},
        [inp("x", x, True), inp("i", idx, dtype="int64"), inp("s", src, True), inp("c", c)],
        ["y", "x.grad", "s.grad"],
        weighted("y", "c"),
    )
    want, gx, gs = x.copy(), c.copy(), np.zeros(src.shape)
    for a, b in np.ndindex(idx.shape):
        place = (idx[a, b], b)
        want[place] = want[place] + src[a, b] if op == "scatter_add" else src[a, b]
        if op == "scatter":
            gx[place] = 0.0
        gs[a, b] = c[place]
    close(ok(r, "y"), want)
    close(ok(r, "x.grad"), gx)
    close(ok(r, "s.grad"), gs)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_add_and_index_put_write_rows(accumulate):
    x = np.arange(1.0, 13.0).reshape(4, 3)
    rows = np.array([3, 1]) if not accumulate else np.array([2, 2])
    v = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    c = np.arange(1.0, 13.0).reshape(4, 3) ** 2
    ins = [inp("x", x, True), inp("i", rows, dtype="int64"), inp("v", v, True), inp("c", c)]
    r = one_op(
        "index_put", {"accumulate": accumulate}, ins, ["y", "x.grad", "v.grad"], weighted("y", "c")
    )
    want, gx = x.copy(), c.copy()
    for k, row in enumerate(rows):
        want[row] = want[row] + v[k] if accumulate else v[k]
        if not accumulate:
            gx[row] = 0.0
    close(ok(r, "y"), want)
    close(ok(r, "x.grad"), gx)
    close(ok(r, "v.grad"), c[rows])
    if accumulate:
        r = one_op("index_add", {"dim": 0}, ins, ["y", "x.grad", "v.grad"], weighted("y", "c"))
        close(ok(r, "y"), want)
        close(ok(r, "x.grad"), c)
        close(ok(r, "v.grad"), c[rows])


def test_layout_changes_take_int64_ids_and_keep_them_int64():
    # ids = ids2.transpose(0, 1)[0]: strided int64 ids (probes/index_select_strided_ids.yaml).
    steps = [
        step("t", ["ids2"], "transpose", dim0=0, dim1=1),
        step("t1", ["t"], "narrow", dim=0, start=0, length=1),
        step("ids", ["t1"], "squeeze", dim=0),
        step("y", ["x", "ids"], "index_select", dim=0),
    ]
    inputs = [
        inp("ids2", [[0, 9], [2, 9], [2, 9]], dtype="int64"),
        inp("x", [[1.0, -2.0], [4.0, 0.0], [2.0, 5.0]], True),
        inp("c", [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
    ]
    r = run(make_probe(inputs, [case("c", steps, ["y", "x.grad"], weighted("y", "c"))]), "f32")
    close(ok(r, "y"), [[1, -2], [2, 5], [2, 5]])
    close(ok(r, "x.grad"), [[1, 2], [0, 0], [8, 10]])


def test_an_index_input_must_be_int64():
    r = one_op(
        "gather",
        {"dim": 0},
        [inp("x", [1.0, 2.0], True), inp("i", [0.0, 1.0])],
        ["y", "x.grad"],
        total("y"),
    )
    assert {o.status for o in r.values()} == {"framework-error"}
    assert "must be int64" in r[("c", "y")].message


# ----- losses -----------------------------------------------------------------------------

LOGITS = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0], [-1.0, 1.0, 1.0], [2.0, 0.0, -2.0]])
TARGETS = np.array([1, 2, 0, 0])


def _reduce(per, reduction, n):
    return {"mean": per.sum() / n, "sum": per.sum(), "none": per}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_integer_targets(reduction):
    m = LOGITS.max(axis=1, keepdims=True)
    logp = LOGITS - m - np.log(np.exp(LOGITS - m).sum(axis=1, keepdims=True))
    n = len(TARGETS)
    per = -logp[np.arange(n), TARGETS]
    onehot = np.eye(3)[TARGETS]
    c = np.ones(n) if reduction != "none" else np.arange(1.0, n + 1)
    scale = {"mean": 1 / n, "sum": 1.0, "none": 1.0}[reduction]
    grad = (np.exp(logp) - onehot) * scale * (c[:, None] if reduction == "none" else 1)
    loss = weighted("y", "c") if reduction == "none" else total("y")
    r = one_op(
        "cross_entropy",
        {"reduction": reduction},
        [inp("x", LOGITS, True), inp("t", TARGETS, dtype="int64"), inp("c", c)],
        ["y", "x.grad"],
        loss,
    )
    close(ok(r, "y"), _reduce(per, reduction, n))
    close(ok(r, "x.grad"), grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll(reduction):
    n = len(TARGETS)
    r = one_op(
        "nll",
        {"reduction": reduction},
        [inp("x", LOGITS, True), inp("t", TARGETS, dtype="int64")],
        ["y", "x.grad"],
        total("y"),
    )
    close(ok(r, "y"), _reduce(-LOGITS[np.arange(n), TARGETS], reduction, n))
    scale = 1 / n if reduction == "mean" else 1.0
    close(ok(r, "x.grad"), -np.eye(3)[TARGETS] * scale)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse(reduction):
    a = np.array([[1.0, 4.0], [-2.0, 0.0]])
    b = np.array([[3.0, 1.0], [-2.0, 5.0]])
    r = one_op(
        "mse",
        {"reduction": reduction},
        [inp("a", a, True), inp("b", b, True)],
        ["y", "a.grad", "b.grad"],
        total("y"),
    )
    close(ok(r, "y"), _reduce((a - b) ** 2, reduction, a.size))
    scale = 1 / a.size if reduction == "mean" else 1.0
    close(ok(r, "a.grad"), 2 * (a - b) * scale)
    close(ok(r, "b.grad"), -2 * (a - b) * scale)


# ----- optimizer loops --------------------------------------------------------------------

THETA = np.array([1.0, -2.0, 3.0])


def _loop_probe(optimizer, steps, compare):
    """θ with loss sum(θ²) (gradient 2θ) stepped ``steps`` times; ``theta`` is also a value."""
    return make_probe(
        [inp("theta", THETA, True)],
        [
            case(
                "c",
                [],
                compare,
                [{"kind": "sum_squares", "input": "theta"}],
                optimizer,
                steps,
            )
        ],
    )


def np_sgd(theta, steps, lr, momentum, dampening, nesterov, weight_decay):
    """PyTorch's documented SGD: rows of (value, grad, after_step, momentum_buffer)."""
    rows = []
    buf = None
    for t in range(steps):
        value = theta.copy()
        grad = 2 * theta
        g = grad + weight_decay * theta
        buf = g.copy() if t == 0 else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
        theta = theta - lr * g
        rows.append((value, grad, theta.copy(), buf.copy()))
    return [np.array(r) for r in zip(*rows, strict=True)]


@pytest.mark.parametrize(
    "settings",
    [
        {"momentum": 0.9, "dampening": 0.25, "nesterov": False, "weight_decay": 0.1},
        {"momentum": 0.5, "dampening": 0.0, "nesterov": True, "weight_decay": 0.0},
    ],
)
def test_sgd_momentum_three_step_loop(settings):
    opt = {"name": "sgd", "lr": 0.1, **settings}
    compare = ["loss", "theta", "theta.grad", "theta.after_step", "theta.momentum_buffer"]
    r = run(_loop_probe(opt, 3, compare))
    value, grad, after, buf = np_sgd(THETA, 3, **{k: v for k, v in opt.items() if k != "name"})
    close(ok(r, "loss"), (value**2).sum(axis=1))
    close(ok(r, "theta"), value)  # the forward value of each iteration, before its update
    close(ok(r, "theta.grad"), grad)  # zeroed between iterations: 2θ, not accumulated
    close(ok(r, "theta.after_step"), after)
    close(ok(r, "theta.momentum_buffer"), buf)
    assert ok(r, "theta.after_step").shape == (3, 3)
    assert ok(r, "loss").shape == (3,)


def np_adam(theta, steps, lr, betas, eps, weight_decay, decoupled):
    """PyTorch's documented Adam (L2 weight decay) or AdamW (decoupled): rows of (grad,
    after_step, exp_avg, exp_avg_sq)."""
    b1, b2 = betas
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    rows = []
    for t in range(1, steps + 1):
        grad = 2 * theta
        g = grad
        if decoupled:
            theta = theta * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * theta
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
        rows.append((grad, theta.copy(), m.copy(), v.copy()))
    return [np.array(r) for r in zip(*rows, strict=True)]


@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_adam_two_step_loop_with_state(name):
    opt = {"name": name, "lr": 0.1, "betas": [0.9, 0.99], "eps": 0.5, "weight_decay": 0.2}
    compare = ["theta.grad", "theta.after_step", "theta.exp_avg", "theta.exp_avg_sq", "loss"]
    r = run(_loop_probe(opt, 2, compare))
    grad, after, m, v = np_adam(THETA, 2, 0.1, (0.9, 0.99), 0.5, 0.2, decoupled=name == "adamw")
    close(ok(r, "theta.grad"), grad)
    close(ok(r, "theta.after_step"), after)
    close(ok(r, "theta.exp_avg"), m)
    close(ok(r, "theta.exp_avg_sq"), v)
    assert ok(r, "loss").shape == (2,)


def test_one_step_keeps_the_quantity_shapes():
    opt = {
        "name": "sgd",
        "lr": 0.5,
        "momentum": 0.0,
        "dampening": 0.0,
        "nesterov": False,
        "weight_decay": 0.0,
    }
    r = run(_loop_probe(opt, 1, ["loss", "theta.grad", "theta.after_step"]))
    assert ok(r, "loss").shape == ()
    close(ok(r, "theta.after_step"), THETA - 0.5 * 2 * THETA)


def test_an_error_in_a_loop_fails_every_quantity():
    p = make_probe(
        [inp("theta", THETA, True), inp("b", [1.0, 2.0])],
        [
            case(
                "c",
                [step("y", ["theta", "b"], "add")],
                ["theta", "loss", "theta.grad", "theta.after_step"],
                total("y"),
                {
                    "name": "sgd",
                    "lr": 0.1,
                    "momentum": 0.0,
                    "dampening": 0.0,
                    "nesterov": False,
                    "weight_decay": 0.0,
                },
                2,
            )
        ],
    )
    r = run(p)
    assert {o.status for o in r.values()} == {"framework-error"}


def test_an_optimizer_pytorch_refuses_is_a_framework_error():
    opt = {
        "name": "sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "dampening": 0.5,
        "nesterov": True,
        "weight_decay": 0.0,
    }
    r = run(_loop_probe(opt, 2, ["loss", "theta.after_step"]))
    assert {o.status for o in r.values()} == {"framework-error"}
    assert "Nesterov" in r[("c", "loss")].message


def test_an_input_the_loss_does_not_reach_has_no_gradient():
    p = make_probe(
        [inp("x", [1.0, -1.0], True), inp("u", [1.0], True)],
        [case("c", [step("y", ["x"], "relu")], ["y", "x.grad", "u.grad"], total("y"))],
    )
    r = run(p)
    close(ok(r, "x.grad"), [1.0, 0.0])
    assert r[("c", "u.grad")].status == "missing-gradient"


# ----- half precision ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_values_are_widened_exactly(dtype):
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -4.0]])
    c = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]])
    r = one_op(
        "max",
        {"dims": [1], "keepdim": False},
        [inp("x", x, True), inp("c", c[:, :1].reshape(2))],
        ["y", "x.grad", "loss"],
        weighted("y", "c"),
        dtype=dtype,
    )
    assert ok(r, "y").tolist() == [1.0, 3.0]
    assert ok(r, "x.grad").tolist() == [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]
    assert ok(r, "loss").tolist() == -2.0


@pytest.mark.parametrize(
    ("dtype", "rounded"),
    [
        # 0.1 rounded once to the run dtype: nearest binary16 / bfloat16 value
        ("f16", 0.0999755859375),
        ("bf16", 0.10009765625),
    ],
)
def test_half_precision_inputs_are_rounded_once(dtype, rounded):
    r = one_op("relu", {}, [inp("x", [0.1, 1.0])], ["y"], dtype=dtype)
    assert ok(r, "y").tolist() == [rounded, 1.0]


def test_half_precision_argmax_and_training_loop():
    r = one_op(
        "argmax", {"dim": 0, "keepdim": False}, [inp("x", [1.0, 4.0, 4.0])], ["y"], dtype="bf16"
    )
    assert ok(r, "y").tolist() == 1
    opt = {
        "name": "sgd",
        "lr": 0.25,
        "momentum": 0.5,
        "dampening": 0.0,
        "nesterov": False,
        "weight_decay": 0.0,
    }
    r = run(_loop_probe(opt, 2, ["theta.after_step", "theta.momentum_buffer"]), "f16")
    _, _, after, buf = np_sgd(THETA, 2, 0.25, 0.5, 0.0, False, 0.0)
    assert ok(r, "theta.after_step").tolist() == after.tolist()  # multiples of 1/8: exact
    assert ok(r, "theta.momentum_buffer").tolist() == buf.tolist()


# ----- the op table -----------------------------------------------------------------------


def test_every_op_of_the_contract_has_an_interpreter():
    import re

    from conftest import REPO

    text = (REPO / "rust/parity-common/src/probe_spec/op.rs").read_text()
    body = text[text.index("pub enum Op {") :]
    body = body[: body.index("\n}\n")]
    variants = re.findall(r"^    ([A-Z][A-Za-z0-9]*)\b", body, flags=re.M)
    snake = {re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", v).lower() for v in variants}
    assert set(probe_torch.OPS) == snake
    assert set(probe_torch.INTEGER_INPUTS) <= snake
    assert probe_torch.INTEGER_OUTPUTS.issubset(snake)


def test_a_backward_error_keeps_the_forward_values():
    # The loss does not depend on x: PyTorch refuses loss.backward(); the forward values
    # and the loss were known before, the gradient is the framework error.
    p = make_probe(
        [inp("a", [2.0, -1.0]), inp("x", [1.0], True)],
        [case("c", [step("y", ["a"], "relu")], ["y", "loss", "x.grad"], total("y"))],
    )
    r = run(p)
    close(ok(r, "y"), [2.0, 0.0])
    close(ok(r, "loss"), 2.0)
    assert r[("c", "x.grad")].status == "framework-error"
    assert "does not require grad" in r[("c", "x.grad")].message


def test_indices_are_checked_before_a_gpu_kernel():
    # On a GPU an out-of-range index is a device-side assertion that ends the process;
    # check_indices refuses it first (checked here on CPU tensors).
    import torch

    check = probe_torch.check_indices
    x = torch.zeros(3, 4)
    with pytest.raises(IndexError, match="index 4 is out of range for 4 dimension -1"):
        check("gather", [x, torch.tensor([[0, 4]])], {"dim": -1})
    with pytest.raises(IndexError, match="index -1 is out of range for 3 dimension 0"):
        check("index_select", [x, torch.tensor([0, -1])], {"dim": 0})
    with pytest.raises(IndexError, match="index 3 is out of range for 3 embedding rows"):
        check("embedding", [torch.tensor([[3]]), x], {})
    with pytest.raises(IndexError, match="index 4 is out of range for 4 classes"):
        check("nll", [x, torch.tensor([0, 4, 1])], {"reduction": "mean"})
    check("gather", [x, torch.tensor([[2, 1]])], {"dim": 0})
    check("cross_entropy", [x, torch.tensor([0, -100, 3])], {"reduction": "mean"})
    check("relu", [x], {})
