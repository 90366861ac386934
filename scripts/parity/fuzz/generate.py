"""Seeded generation of fuzz cases: one op, random valid shapes and arguments, and per
input a random layout route to its logical values.

A :class:`Case` is plain data: the op, its YAML arguments, per float input a logical
shape, a :class:`Route` and the *stored* values (the leaf the route starts from), and the
integer weights of the loss ``weighted_sum(y, w)``. :func:`to_doc` writes it as a probe
document in the v2 YAML form (one case named ``case``), so a finding is directly a probe
file; :func:`to_probe` parses that document with ``loader.parse`` (validation, shape
inference). Validity of shapes and arguments is decided by ``probe_shapes.infer``.

Values are small integers (multiples of 1/8 for a few ops), so products and sums are
exact in float32 wherever the op is exact. Same seed → same cases, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from parity.probe import format as probes
from parity.probe import ops as probe_ops
from parity.probe import shapes as probe_shapes
from parity.probe.loader import parse
from parity.probe.shapes_common import ShapeError

#: A layout step: (op, YAML arguments), applied forward from the stored leaf.
LayoutStep = tuple[str, dict]


@dataclass(frozen=True)
class Route:
    """Layout steps from a stored leaf to the op's logical input (empty: contiguous)."""

    steps: tuple[LayoutStep, ...] = ()

    def kinds(self) -> list[str]:
        """The step ops, in order (``["transpose", "narrow"]``)."""
        return [op for op, _ in self.steps]


@dataclass(frozen=True)
class Input:
    """One float input: its logical ``shape``, ``route`` and the stored leaf's
    ``stored_shape`` and flat ``stored`` float64 values."""

    shape: tuple[int, ...]
    route: Route
    stored_shape: tuple[int, ...]
    stored: tuple[float, ...]

    def logical(self) -> np.ndarray:
        """The op's input values (float64, ``shape``): the route applied to the leaf."""
        return apply_route(np.asarray(self.stored).reshape(self.stored_shape), self.route)


@dataclass(frozen=True)
class Case:
    """One fuzz case: ``op`` with YAML ``args`` on ``inputs`` (their names ``x0``, ``x1``,
    …), loss ``weighted_sum(y, w)`` with flat integer ``weights`` of the output shape."""

    op: str
    args: dict
    inputs: tuple[Input, ...]
    out_shape: tuple[int, ...]
    weights: tuple[float, ...] = field(default=())

    def with_inputs(self, inputs: Sequence[Input]) -> Case:
        """A copy with other inputs (same logical shapes)."""
        return replace(self, inputs=tuple(inputs))


# ----- routes -----------------------------------------------------------------------------


def apply_route(stored: np.ndarray, route: Route) -> np.ndarray:
    """The route's layout steps applied to ``stored`` (numpy, as PyTorch would)."""
    x = stored
    for op, a in route.steps:
        if op == "transpose":
            x = np.swapaxes(x, a["dim0"], a["dim1"])
        elif op == "narrow":
            x = np.take(x, range(a["start"], a["start"] + a["length"]), axis=a["dim"])
        elif op == "broadcast_to":
            x = np.broadcast_to(x, a["shape"])
        else:
            raise ValueError(f"not a route step: {op}")
    return x


def route_adjoint(route: Route, grad: np.ndarray, stored_shape: Sequence[int]) -> np.ndarray:
    """The gradient of the stored leaf given the gradient ``grad`` of the route's output
    (transpose back, narrow → zeros with the slice, broadcast → sum over the expanded
    dims)."""
    shapes = [tuple(stored_shape)]
    for step in route.steps:
        shapes.append(_step_shape(shapes[-1], step))
    g = grad
    for (op, a), before in zip(reversed(route.steps), reversed(shapes[:-1]), strict=True):
        if op == "transpose":
            g = np.swapaxes(g, a["dim0"], a["dim1"])
        elif op == "narrow":
            z = np.zeros(before)
            idx = [slice(None)] * len(before)
            idx[a["dim"]] = slice(a["start"], a["start"] + a["length"])
            z[tuple(idx)] = g
            g = z
        else:
            lead = g.ndim - len(before)
            g = g.sum(axis=tuple(range(lead))) if lead else g
            dims = tuple(i for i, n in enumerate(before) if n == 1 and g.shape[i] != 1)
            g = g.sum(axis=dims, keepdims=True) if dims else g
    return g


def _step_shape(shape: tuple[int, ...], step: LayoutStep) -> tuple[int, ...]:
    op, a = step
    return tuple(probe_shapes.infer(op, probe_ops.op_args(op, a), [list(shape)])[0])


def random_route(rng: np.random.Generator, shape: Sequence[int]) -> tuple[Route, tuple]:
    """A random route to a tensor of logical ``shape``: contiguous, a transpose, a narrow
    at a non-zero offset, a broadcast of a size-1 dim, or a chain of two (two transposes
    make a permutation). Returns (route, stored shape). Built backwards from ``shape``."""
    n = int(rng.choice([0, 1, 1, 2, 2]))
    target = tuple(shape)
    steps: list[LayoutStep] = []
    for _ in range(n):
        kind = str(rng.choice(["transpose", "narrow", "broadcast_to"]))
        made = _inverse_step(rng, kind, target)
        if made is None:
            continue
        step, target = made
        steps.insert(0, step)
    return Route(tuple(steps)), target


def _inverse_step(rng, kind: str, out: tuple[int, ...]):
    """(step, its input shape) for a step of ``kind`` whose output is ``out``; None when
    ``out`` allows none (a rank below 2 for a transpose)."""
    r = len(out)
    if kind == "transpose":
        if r < 2:
            return None
        d0, d1 = (int(d) for d in rng.choice(r, size=2, replace=False))
        before = list(out)
        before[d0], before[d1] = before[d1], before[d0]
        return ("transpose", {"dim0": d0, "dim1": d1}), tuple(before)
    if kind == "narrow":
        if r < 1:
            return None
        d = int(rng.integers(r))
        start = int(rng.integers(1, 3))
        tail = int(rng.integers(0, 2))
        before = list(out)
        before[d] = out[d] + start + tail
        step = ("narrow", {"dim": d, "start": start, "length": out[d]})
        return step, tuple(before)
    # broadcast_to: a size-1 dim expanded, or a new leading dim.
    grown = [i for i, n in enumerate(out) if n > 1]
    if not grown:
        return None
    d = int(rng.choice(grown))
    before = list(out)
    before[d] = 1
    if d == 0 and rng.random() < 0.5:
        before = before[1:]
    return ("broadcast_to", {"shape": list(out)}), tuple(before)


# ----- values -----------------------------------------------------------------------------

#: Ops whose inputs get distinct values (no ties: maxima and sorting have one answer).
DISTINCT = frozenset({"max", "min", "max_pool2d"})
#: Ops whose inputs get multiples of 1/8 in [-2, 2] (smooth functions: values small).
EIGHTHS = frozenset(
    {
        "sigmoid",
        "tanh",
        "silu",
        "gelu",
        "elu",
        "exp",
        "softmax",
        "log_softmax",
        "layer_norm",
        "bce_with_logits",
    }
)


def random_values(rng, op: str, n: int, position: int) -> np.ndarray:
    """``n`` float64 values for input ``position`` of ``op``: small integers in −3…3,
    distinct integers for :data:`DISTINCT` ops, eighths for :data:`EIGHTHS` ops, and a
    divisor of ±1, ±2, ±4, ±1/2 for ``div``'s second input."""
    if op in DISTINCT:
        return rng.permutation(n).astype(np.float64) - n // 2
    if op in EIGHTHS:
        return rng.integers(-16, 17, size=n) / 8.0
    if op == "div" and position == 1:
        return rng.choice([-4.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 4.0], size=n)
    return rng.integers(-3, 4, size=n).astype(np.float64)


# ----- ops --------------------------------------------------------------------------------


def _d(rng, lo=1, hi=6) -> int:
    return int(rng.integers(lo, hi + 1))


def _shape(rng, lo_rank=1, hi_rank=4) -> list[int]:
    return [_d(rng) for _ in range(int(rng.integers(lo_rank, hi_rank + 1)))]


def _conv(rng, spatial: int, transpose: bool):
    g = int(rng.choice([1, 1, 1, 2]))
    b, cin, cout = _d(rng, 1, 3), g * _d(rng, 1, 3), g * _d(rng, 1, 3)
    ks = [_d(rng, 1, 4) for _ in range(spatial)]
    ls = [_d(rng, 1, 6) for _ in range(spatial)]
    args = {
        "stride": int(rng.integers(1, 4)),
        "padding": int(rng.integers(0, 3)),
        "dilation": int(rng.integers(1, 3)),
        "groups": g,
    }
    if transpose:
        args["output_padding"] = int(rng.integers(0, 2))
        return [[b, cin, *ls], [cin, cout // g, *ks]], args
    return [[b, cin, *ls], [cout, cin // g, *ks]], args


def _matmul(rng):
    batch = [_d(rng, 1, 4) for _ in range(int(rng.integers(0, 3)))]
    m, k, n = _d(rng), _d(rng), _d(rng)
    return [[*batch, m, k], [*batch, k, n]], {}


def _linear(rng):
    x = _shape(rng, 1, 3)
    out = _d(rng)
    shapes = [x, [out, x[-1]]]
    if rng.random() < 0.5:
        shapes.append([out])
    return shapes, {}


def _unary(rng):
    return [_shape(rng)], {}


def _binary(rng):
    s = _shape(rng)
    return [s, list(s)], {}


def _dim_op(rng):
    s = _shape(rng)
    return [s], {"dim": int(rng.integers(-len(s), len(s)))}


def _softmax(rng):
    shapes, args = _dim_op(rng)
    args["candle"] = "fused" if args["dim"] == -1 and rng.random() < 0.5 else "slow"
    return shapes, args


def _reduce(rng):
    s = _shape(rng)
    r = len(s)
    pick = rng.random()
    args: dict[str, Any] = {"keepdim": bool(rng.random() < 0.5)}
    if pick < 0.5:
        args["dim"] = int(rng.integers(-r, r))
    elif pick < 0.8 and r > 1:
        args["dim"] = sorted(int(d) for d in rng.choice(r, size=2, replace=False))
    return [s], args


def _pool(rng):
    k = int(rng.integers(1, 4))
    args = {
        "kernel": k,
        "stride": int(rng.integers(1, 4)),
        "padding": int(rng.integers(0, k // 2 + 1)),
    }
    return [[_d(rng, 1, 3), _d(rng, 1, 3), _d(rng), _d(rng)]], args


def _layer_norm(rng):
    x = _shape(rng, 1, 3)
    return [x, [x[-1]], [x[-1]]], {"candle": str(rng.choice(["fused", "slow"]))}


def _upsample1d(rng):
    return [[_d(rng, 1, 3), _d(rng, 1, 3), _d(rng)]], {"size": _d(rng)}


def _upsample2d(rng):
    return [[_d(rng, 1, 3), _d(rng, 1, 3), _d(rng), _d(rng)]], {"size": [_d(rng), _d(rng)]}


#: op → f(rng) → (input shapes, YAML arguments), not yet validated.
GENERATORS: dict[str, Callable] = {
    "conv1d": lambda rng: _conv(rng, 1, False),
    "conv2d": lambda rng: _conv(rng, 2, False),
    "conv_transpose1d": lambda rng: _conv(rng, 1, True),
    "conv_transpose2d": lambda rng: _conv(rng, 2, True),
    "matmul": _matmul,
    "linear": _linear,
    "layer_norm": _layer_norm,
    "softmax": _softmax,
    "log_softmax": _dim_op,
    "max_pool2d": _pool,
    "avg_pool2d": _pool,
    "upsample_nearest1d": _upsample1d,
    "upsample_nearest2d": _upsample2d,
    **dict.fromkeys(["relu", "abs", "sigmoid", "tanh", "silu", "exp"], _unary),
    **dict.fromkeys(["add", "sub", "mul", "div"], _binary),
    **dict.fromkeys(["sum", "mean", "max", "min"], _reduce),
}
#: Every op the generator supports (config ``fuzz.ops`` defaults to these), sorted.
SUPPORTED_OPS = tuple(sorted(GENERATORS))
#: Ops whose inputs after the first are weights (their gradients: "weight gradient").
WEIGHTED_OPS = frozenset(
    {"conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "linear", "layer_norm"}
)


def out_shape(op: str, args: dict, shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """The output shape of ``op`` (YAML ``args``) on ``shapes``, or None when
    ``probe_shapes.infer`` refuses them or a dimension leaves 1…6 … 0 elements."""
    try:
        out, _ = probe_shapes.infer(op, probe_ops.op_args(op, args), shapes)
    except ShapeError:
        return None
    if any(n < 1 for n in out) or math.prod(out) > 4096:
        return None
    return tuple(out)


def degenerate(op: str, inputs: Sequence[Input]) -> bool:
    """Whether the inputs make ``op`` ill-conditioned, where rounding differences are
    amplified beyond the float64-referenced rule's floor: layer_norm of a row whose values
    are all equal (variance 0: the gradient is rounding noise scaled by 1/√eps), which a
    broadcast route along the last dimension produces."""
    if op != "layer_norm" or inputs[0].shape[-1] < 2:
        return False
    x = inputs[0].logical()
    return bool(np.any(np.all(x == x[..., :1], axis=-1)))


def make_case(rng: np.random.Generator, op: str, tries: int = 200) -> Case:
    """One random valid case of ``op``. Raises ``ValueError`` for an op the generator
    does not support, or when ``tries`` draws give no valid shapes."""
    if op not in GENERATORS:
        raise ValueError(
            f"the fuzzer does not generate {op!r}; it knows {', '.join(SUPPORTED_OPS)}"
        )
    for _ in range(tries):
        shapes, args = GENERATORS[op](rng)
        out = out_shape(op, args, shapes)
        if out is None:
            continue
        inputs = []
        for i, s in enumerate(shapes):
            route, stored_shape = random_route(rng, s)
            vals = random_values(rng, op, math.prod(stored_shape), i)
            inputs.append(Input(tuple(s), route, stored_shape, tuple(float(v) for v in vals)))
        if degenerate(op, inputs):
            continue
        weights = rng.integers(-2, 3, size=math.prod(out)).astype(np.float64)
        return Case(op, args, tuple(inputs), out, tuple(float(w) for w in weights))
    raise ValueError(f"no valid {op} case in {tries} draws")


def generate(seed: int, ops: Sequence[str], cases_per_op: int) -> list[tuple[str, Case]]:
    """``cases_per_op`` cases of every op in ``ops``, named ``fuzz_{op}_{i:04d}``, from one
    numpy Generator seeded with ``seed`` per op (adding an op leaves the others' cases as
    they were)."""
    out = []
    for op in ops:
        rng = np.random.default_rng([seed, SUPPORTED_OPS.index(op) if op in SUPPORTED_OPS else 0])
        out += [(f"fuzz_{op}_{i:04d}", make_case(rng, op)) for i in range(cases_per_op)]
    return out


# ----- probe documents --------------------------------------------------------------------


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else float(v)


def input_name(i: int) -> str:
    """The name of input ``i`` of the op: ``x0``, ``x1``, …"""
    return f"x{i}"


def to_doc(case: Case, description: str = "") -> dict:
    """The case as a probe document (v2 YAML form, plain data): inputs ``x0``… (stored
    leaves, ``requires_grad``) and ``w`` (loss weights), one case ``case`` whose steps
    are each input's route then the op (out ``y``), loss ``weighted_sum: [y, w]``,
    compared ``y`` and every input's gradient."""
    inputs: dict[str, Any] = {}
    steps: list[dict] = []
    names = []
    for i, inp in enumerate(case.inputs):
        name = input_name(i)
        inputs[name] = {
            "shape": list(inp.stored_shape),
            "values": [_num(v) for v in inp.stored],
            "requires_grad": True,
        }
        at = name
        for j, (op, a) in enumerate(inp.route.steps):
            out = f"{name}_{j + 1}"
            steps.append({op: {"in": at, **a, "out": out}})
            at = out
        names.append(at)
    inputs["w"] = {"shape": list(case.out_shape), "values": [_num(v) for v in case.weights]}
    steps.append({case.op: {"in": names if len(names) > 1 else names[0], **case.args, "out": "y"}})
    routes = "; ".join(
        f"{input_name(i)}: {' → '.join(inp.route.kinds()) or 'contiguous'}"
        for i, inp in enumerate(case.inputs)
    )
    return {
        "description": description
        or f"Fuzz case: {case.op} on logical shapes "
        f"{[list(i.shape) for i in case.inputs]} through layout routes ({routes}).",
        "inputs": inputs,
        "cases": {
            "case": {
                "steps": steps,
                "loss": {"weighted_sum": ["y", "w"]},
                "compare": ["y", *[f"{input_name(i)}.grad" for i in range(len(case.inputs))]],
            }
        },
    }


def to_probe(name: str, case: Case) -> probes.Probe:
    """The case parsed as probe ``name`` (``loader.parse``). Raises ``probes.ProbeError``
    when it is not a valid probe (a generator bug)."""
    return parse(f"{name}.yaml", to_doc(case))


def dump(doc: dict) -> str:
    """A probe document as YAML text (block style, keys in order; stable bytes)."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
