"""Seeded generation of fuzz cases: one op, random valid shapes and arguments, and per
input a random layout route to its logical values.

A :class:`Case` is plain data: the op, its YAML arguments, per input a logical shape, a
:class:`Route`, the *stored* values (the leaf the route starts from) and its kind (float,
or int64 for indices and class targets), and the integer weights of the loss
``weighted_sum(y, w)`` (none for an op with an int64 output: then only ``y`` is compared).
The ops' generators are in ``generators`` (one per op of the probe language, gathered in
``generators.table``).
:func:`to_doc` writes it as a probe document in the v2 YAML form (one case named
``case``), so a finding is directly a probe file; :func:`to_probe` parses that document
with ``loader.parse`` (validation, shape inference). Validity of shapes and arguments is
decided by ``probe_shapes.infer``.

Values are small integers (multiples of 1/8 for a few ops; see :func:`random_values`), so
products and sums are exact in float32 wherever the op is exact. Same seed → same cases,
byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from parity.fuzz.generators.index import UNIQUE_INDEX, index_values, repeats_a_write
from parity.fuzz.generators.table import GENERATORS, SEED_ORDER
from parity.probe import format as probes
from parity.probe import ops as probe_ops
from parity.probe.loader import parse
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import FLOAT, INT64, ShapeError

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
    """One input: its logical ``shape``, ``route`` and the stored leaf's ``stored_shape``
    and flat ``stored`` float64 values; ``dtype`` ``"float"`` (the run's dtype) or
    ``"int64"`` (indices, class targets: integer values, no gradient); ``grad`` whether
    its gradient is computed and compared (not for int64 inputs nor bce_with_logits'
    targets)."""

    shape: tuple[int, ...]
    route: Route
    stored_shape: tuple[int, ...]
    stored: tuple[float, ...]
    dtype: str = FLOAT
    grad: bool = True

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
DISTINCT = frozenset(
    {"max", "min", "max_pool2d", "max_pool1d", "argmax", "argmin", "sort", "argsort"}
)
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
        "rms_norm",
        "cross_entropy",
    }
)


def random_values(rng, op: str, n: int, position: int) -> np.ndarray:
    """``n`` float64 values for float input ``position`` of ``op``: small integers in
    −3…3, distinct integers for :data:`DISTINCT` ops, eighths for :data:`EIGHTHS` ops, a
    divisor of ±1, ±2, ±4, ±1/2 for ``div``'s second input, powers of two ¼…8 for ``log``
    (exact gradients 1/x), squares of ½…3 for ``sqrt`` (exact roots), even integers for
    ``maximum``/``minimum``'s first input and odd ones for its second (never a tie: the
    gradient of a tie is a convention), 0 or 1 for ``bce_with_logits``' targets."""
    if position == 1 and op == "bce_with_logits":
        return rng.integers(0, 2, size=n).astype(np.float64)
    if op == "log":
        return 2.0 ** rng.integers(-2, 4, size=n)
    if op == "sqrt":
        return (rng.integers(1, 7, size=n) / 2.0) ** 2
    if op in ("maximum", "minimum"):
        return 2.0 * rng.integers(-3, 4, size=n) + position
    if op in DISTINCT:
        return rng.permutation(n).astype(np.float64) - n // 2
    if op in EIGHTHS:
        return rng.integers(-16, 17, size=n) / 8.0
    if op == "div" and position == 1:
        return rng.choice([-4.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 4.0], size=n)
    return rng.integers(-3, 4, size=n).astype(np.float64)


# ----- ops --------------------------------------------------------------------------------

#: Every op the generator supports (config ``fuzz.ops`` defaults to these), sorted.
SUPPORTED_OPS = tuple(sorted(GENERATORS))
#: Ops whose inputs after the first are weights (their gradients: "weight gradient"); of
#: embedding, input 1 (its input 0 is the int64 index).
WEIGHTED_OPS = frozenset(
    {
        "conv1d",
        "conv2d",
        "conv_transpose1d",
        "conv_transpose2d",
        "linear",
        "layer_norm",
        "rms_norm",
        "embedding",
    }
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


def degenerate(op: str, inputs: Sequence[Input], args: dict | None = None) -> bool:
    """Whether the inputs make ``op`` ill-conditioned or its answer a convention, where
    the frameworks may differ without a bug: layer_norm of a row whose values are all
    equal (variance 0: the gradient is rounding noise scaled by 1/√eps), which a broadcast
    route along the last dimension produces; rms_norm of a row of zeros (the same, 1/√eps);
    a tie along the dimension of a sort or of argmax/argmin (which index comes first is a
    convention; a broadcast route makes ties); an index of scatter or index_put (without
    accumulate) that writes a position twice (the result depends on the order of the
    writes); a pooling window over padding only (:func:`empty_window`)."""
    args = args or {}
    if op == "layer_norm" and inputs[0].shape[-1] >= 2:
        x = inputs[0].logical()
        return bool(np.any(np.all(x == x[..., :1], axis=-1)))
    if op == "rms_norm":
        return bool(np.any(np.all(inputs[0].logical() == 0, axis=-1)))
    if op in ("sort", "argsort", "argmax", "argmin"):
        x = np.moveaxis(inputs[0].logical(), args["dim"] % len(inputs[0].shape), -1)
        s = np.sort(x, axis=-1)
        return bool(np.any(s[..., 1:] == s[..., :-1]))
    if op in UNIQUE_INDEX:
        return repeats_a_write(op, args, inputs[1].logical())
    if op in POOLS:
        return empty_window(op, args, inputs[0].shape)
    return False


#: The pooling ops (:func:`empty_window`).
POOLS = frozenset({"max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d"})


def empty_window(op: str, args: dict, shape: Sequence[int]) -> bool:
    """Whether a window of pooling ``op`` (YAML ``args``) over an input of ``shape`` holds
    no input element, only padding (dilation, or ceil mode's last window, can make one):
    its maximum is −∞ and its average 0/0 in PyTorch, and PyTorch 2.15's max_pool1d
    corrupts the heap on one (kernel 2, stride 2, padding 1, dilation 2, ceil mode over a
    length of 1: "free(): invalid next size", found by this fuzzer), so no case has one."""
    a = probe_ops.op_args(op, args)
    spatial = 1 if op.endswith("1d") else 2
    out = probe_shapes.infer(op, a, [list(shape)])[0]
    for i in range(spatial):
        k, s, p = (
            a[x] if isinstance(a[x], int) else a[x][i] for x in ("kernel", "stride", "padding")
        )
        dil = a.get("dilation", 1)
        dil = dil if isinstance(dil, int) else dil[i]
        size = shape[2 + i]
        for o in range(out[2 + i]):
            if not any(0 <= o * s - p + j * dil < size for j in range(k)):
                return True
    return False


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
        ints = probe_shapes.INTEGER_INPUTS.get(op, ())
        for i, s in enumerate(shapes):
            if i in ints and op in UNIQUE_INDEX:
                route, stored_shape = Route(), tuple(s)
            else:
                route, stored_shape = random_route(rng, s)
            if i in ints:
                vals = index_values(rng, op, args, shapes, stored_shape)
            else:
                vals = random_values(rng, op, math.prod(stored_shape), i)
            stored = tuple(float(v) for v in vals)
            kind = INT64 if i in ints else FLOAT
            grad = i not in ints and not (op == "bce_with_logits" and i == 1)
            inputs.append(Input(tuple(s), route, stored_shape, stored, kind, grad))
        if degenerate(op, inputs, args):
            continue
        if op in probe_shapes.INTEGER_OUTPUT:
            return Case(op, args, tuple(inputs), out, ())
        weights = rng.integers(-2, 3, size=math.prod(out)).astype(np.float64)
        return Case(op, args, tuple(inputs), out, tuple(float(w) for w in weights))
    raise ValueError(f"no valid {op} case in {tries} draws")


def generate(seed: int, ops: Sequence[str], cases_per_op: int) -> list[tuple[str, Case]]:
    """``cases_per_op`` cases of every op in ``ops``, named ``fuzz_{op}_{i:04d}``, from one
    numpy Generator per op seeded with ``[seed, generators.SEED_ORDER.index(op)]`` (adding
    an op leaves the others' cases as they were)."""
    out = []
    for op in ops:
        rng = np.random.default_rng([seed, SEED_ORDER.index(op) if op in SEED_ORDER else 0])
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
    leaves; ``requires_grad`` where ``Input.grad``, ``dtype: int64`` for integer inputs)
    and ``w`` (loss weights), one case ``case`` whose steps are each input's route then the
    op (out ``y``), loss ``weighted_sum: [y, w]``, compared ``y`` and the gradient of every
    input with ``grad``. A scalar ``y`` (a loss op, a reduction over every dimension) is the
    loss itself, ``sum: y`` (a weight of rank 0 adds nothing, and burn holds no rank-0
    tensor); an op with an int64 output has no loss and compares ``y`` only."""
    inputs: dict[str, Any] = {}
    steps: list[dict] = []
    names = []
    for i, inp in enumerate(case.inputs):
        name = input_name(i)
        inputs[name] = {"shape": list(inp.stored_shape), "values": [_num(v) for v in inp.stored]}
        if inp.dtype == INT64:
            inputs[name]["dtype"] = INT64
        elif inp.grad:
            inputs[name]["requires_grad"] = True
        at = name
        for j, (op, a) in enumerate(inp.route.steps):
            out = f"{name}_{j + 1}"
            steps.append({op: {"in": at, **a, "out": out}})
            at = out
        names.append(at)
    scored = case.op not in probe_shapes.INTEGER_OUTPUT
    weighted = scored and len(case.out_shape) > 0
    if weighted:
        inputs["w"] = {"shape": list(case.out_shape), "values": [_num(v) for v in case.weights]}
    steps.append({case.op: {"in": names if len(names) > 1 else names[0], **case.args, "out": "y"}})
    routes = "; ".join(
        f"{input_name(i)}: {' → '.join(inp.route.kinds()) or 'contiguous'}"
        for i, inp in enumerate(case.inputs)
    )
    body: dict[str, Any] = {"steps": steps}
    if scored:
        body["loss"] = {"weighted_sum": ["y", "w"]} if weighted else {"sum": "y"}
    grads = [f"{input_name(i)}.grad" for i, inp in enumerate(case.inputs) if inp.grad]
    body["compare"] = ["y", *(grads if scored else [])]
    return {
        "description": description
        or f"Fuzz case: {case.op} on logical shapes "
        f"{[list(i.shape) for i in case.inputs]} through layout routes ({routes}).",
        "inputs": inputs,
        "cases": {"case": body},
    }


def to_probe(name: str, case: Case) -> probes.Probe:
    """The case parsed as probe ``name`` (``loader.parse``). Raises ``probes.ProbeError``
    when it is not a valid probe (a generator bug)."""
    return parse(f"{name}.yaml", to_doc(case))


def dump(doc: dict) -> str:
    """A probe document as YAML text (block style, keys in order; stable bytes)."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
