"""Greedy shrinking of a failing fuzz case to a minimal one that fails the same way.

Each round builds every one-step simplification of the case (in this order: an input made
contiguous, one layout step dropped from a route, an argument set to its simplest value
(stride 1, padding 0, dilation 1, output_padding 0, keepdim false, ceil_mode false,
count_include_pad true, descending false; one side of a ``pad`` step 0, or its first pair
dropped; a ``narrow`` step's start 0 or length 1; no bias), a size-1 dimension removed, a
dimension made one smaller — alone, and together with one dimension of the same size of
each other input, in every such choice, for sizes that must agree such as matmul's k),
keeps those that are valid (``generate.out_shape``) and strictly smaller (:func:`size`),
runs them all in one batch through the checker, and takes the first that still has the
failure's signature (framework, release, dtype, kind). It stops when no candidate keeps
it, or after ``rounds`` rounds.

Logical input values survive every step (sliced where a dimension shrinks); the loss
weights are kept while the output shape is, else made 1, 2, 3, 1, 2, 3, … An integer input
keeps its kind, and its values stay valid: where a dimension they index shrinks, each is
taken modulo the new size (``generators.index.index_bound``); a candidate whose index then
writes a position twice (scatter, index_put without accumulate), or whose sort now has a
tie, is dropped (``generate.degenerate``). A ``reshape`` whose input shrank flattens it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from parity.fuzz.check import Checker, Failure
from parity.fuzz.generate import Case, Input, Route, apply_route, degenerate, out_shape
from parity.fuzz.generators.index import index_bound
from parity.probe.shapes.table import INTEGER_INPUTS

#: Argument → its simplest value (tried in this order; ``pad``'s padding pairs apart).
SIMPLEST = {
    "stride": 1,
    "padding": 0,
    "dilation": 1,
    "output_padding": 0,
    "keepdim": False,
    "ceil_mode": False,
    "count_include_pad": True,
    "descending": False,
}
#: Ops with an optional last input (a bias) that shrinking drops.
OPTIONAL_BIAS = {"linear": 3, "conv_transpose1d": 3, "conv_transpose2d": 3}
#: Filler of the elements a narrow leaves out.
FILLER = 5.0


def size(case: Case) -> tuple[int, int, int, int]:
    """What shrinking reduces, compared in order: layout steps, logical elements, stored
    elements, arguments away from their simplest value and inputs."""
    steps = sum(len(i.route.steps) for i in case.inputs)
    logical = sum(math.prod(i.shape) for i in case.inputs)
    stored = sum(math.prod(i.stored_shape) for i in case.inputs)
    args = sum(1 for k, v in SIMPLEST.items() if k in case.args and case.args[k] != v)
    if case.op == "narrow":
        args += (case.args["start"] != 0) + (case.args["length"] != 1)
    if case.op == "pad":
        args = sum(1 for pair in case.args["padding"] for v in pair if v) + len(
            case.args["padding"]
        )
    return (steps, logical, stored, args + len(case.inputs))


def restore(route: Route, logical: np.ndarray) -> Input | None:
    """An input whose ``route`` leads to ``logical``: the route's step arguments adapted to
    the logical shape (narrow lengths, broadcast shapes), the stored leaf rebuilt backwards
    (narrowed-away elements :data:`FILLER`, an expanded dimension stored once). None when
    the route cannot reach ``logical`` (a dimension out of range, values not constant
    along a broadcast)."""
    shape = logical.shape
    # Forward shapes of the route: rebuild backwards, recording each step's input shape.
    steps = []
    x = logical
    try:
        for op, a in reversed(route.steps):
            if op == "transpose":
                x = np.swapaxes(x, a["dim0"], a["dim1"])
                steps.insert(0, (op, dict(a)))
            elif op == "narrow":
                d, start = a["dim"], a["start"]
                length = x.shape[d]
                tail = np.full((*x.shape[:d], 1, *x.shape[d + 1 :]), FILLER)
                head = np.full((*x.shape[:d], start, *x.shape[d + 1 :]), FILLER)
                steps.insert(0, (op, {"dim": d, "start": start, "length": length}))
                x = np.concatenate([head, x, tail], axis=d)
            else:
                # The step records only the target shape, not which dimension it expanded:
                # store once the first dimension (of size > 1) along which the values are
                # constant; the rank is kept.
                target = list(x.shape)
                if len(a["shape"]) != len(target):
                    return None
                keep = [i for i in range(len(target)) if target[i] > 1 and _constant(x, i)]
                if not keep:
                    return None
                x = np.take(x, [0], axis=keep[0])
                steps.insert(0, (op, {"shape": target}))
    except (IndexError, ValueError, np.exceptions.AxisError):
        return None
    r = Route(tuple(steps))
    stored = np.array(x)  # a copy, row-major; keeps rank 0 (ascontiguousarray does not)
    try:
        back = apply_route(stored, r)
    except (IndexError, ValueError, np.exceptions.AxisError):
        return None
    if back.shape != shape or not np.array_equal(back, logical):
        return None
    flat = tuple(float(v) for v in stored.reshape(-1))
    return Input(tuple(shape), r, tuple(stored.shape), flat)


def _constant(x: np.ndarray, axis: int) -> bool:
    return bool(np.all(x == np.take(x, [0], axis=axis)))


def _weights(case: Case, out: tuple[int, ...]) -> tuple[float, ...]:
    if tuple(out) == tuple(case.out_shape) or not case.weights:
        return case.weights
    return tuple(float(i % 3 + 1) for i in range(math.prod(out)))


def _rebuild(case: Case, logicals: Sequence[np.ndarray], routes: Sequence[Route], args=None):
    """A case of the same op from new logical values, routes and arguments (inputs of the
    kinds of ``case``'s first ones), or None when it is not valid. Integer values are
    taken modulo the size they index."""
    args = case.args if args is None else args
    shapes = [list(v.shape) for v in logicals]
    if case.op == "reshape" and math.prod(args["shape"]) != math.prod(shapes[0]):
        args = {"shape": [math.prod(shapes[0])]}  # the input shrank: flatten it
    try:
        out = out_shape(case.op, args, shapes)
    except (TypeError, KeyError, IndexError):  # an argument of the wrong form for the op
        return None
    if out is None:
        return None
    ints = INTEGER_INPUTS.get(case.op, ())
    inputs = []
    for i, (v, r) in enumerate(zip(logicals, routes, strict=True)):
        if i in ints:
            v = np.mod(v, index_bound(case.op, args, shapes))
        inp = restore(r, v) if r.steps else restore(Route(), v)
        if inp is None:
            inp = restore(Route(), v)
        was = case.inputs[i]
        inputs.append(replace(inp, dtype=was.dtype, grad=was.grad))
    if degenerate(case.op, inputs, args):
        return None
    return Case(case.op, dict(args), tuple(inputs), out, _weights(case, out))


def candidates(case: Case) -> list[Case]:
    """Every one-step simplification of ``case`` that is valid and smaller, in the order
    they are preferred."""
    logicals = [np.array(i.logical()) for i in case.inputs]
    routes = [i.route for i in case.inputs]
    out: list[Case | None] = []
    for i, r in enumerate(routes):
        if r.steps:
            out.append(_rebuild(case, logicals, [*routes[:i], Route(), *routes[i + 1 :]]))
            for j in range(len(r.steps)):
                shorter = Route(r.steps[:j] + r.steps[j + 1 :])
                out.append(_rebuild(case, logicals, [*routes[:i], shorter, *routes[i + 1 :]]))
    for k, v in SIMPLEST.items():
        if k in case.args and case.args[k] != v and case.op != "pad":
            out.append(_rebuild(case, logicals, routes, {**case.args, k: v}))
    if case.op == "pad":
        pairs = case.args["padding"]
        for j, pair in enumerate(pairs):
            for side in (0, 1):
                if pair[side]:
                    fewer = [list(p) for p in pairs]
                    fewer[j][side] = 0
                    out.append(_rebuild(case, logicals, routes, {"padding": fewer}))
        if len(pairs) > 1:
            out.append(_rebuild(case, logicals, routes, {"padding": pairs[1:]}))
    if case.op == "narrow":
        for k, v in (("start", 0), ("length", 1)):
            if case.args[k] != v:
                out.append(_rebuild(case, logicals, routes, {**case.args, k: v}))
    if len(logicals) == OPTIONAL_BIAS.get(case.op):
        out.append(_rebuild(case, logicals[:-1], routes[:-1]))
    for i, v in enumerate(logicals):
        for d, n in enumerate(v.shape):
            if n == 1 and v.ndim > 1:
                smaller = [*logicals]
                smaller[i] = np.take(v, 0, axis=d)
                out.append(_rebuild(case, smaller, routes))
    for i, v in enumerate(logicals):
        for d, n in enumerate(v.shape):
            if n < 2:
                continue
            alone = [*logicals]
            alone[i] = np.take(v, range(n - 1), axis=d)
            out.append(_rebuild(case, alone, routes))
            others = [j for j, w in enumerate(logicals) if j != i and n in w.shape]
            # An index op's inputs agree pairwise (scatter's index and src, not x): each
            # other input may also keep its size there.
            keep_one = [None] if case.op in INTEGER_INPUTS else []
            choices = [
                [e for e, m in enumerate(logicals[j].shape) if m == n] + keep_one for j in others
            ]
            for pick in itertools.islice(itertools.product(*choices), 32 if keep_one else 16):
                if not others:
                    break
                coupled = [*alone]
                for j, e in zip(others, pick, strict=True):
                    if e is not None:
                        coupled[j] = np.take(logicals[j], range(n - 1), axis=e)
                out.append(_rebuild(case, coupled, routes))
    seen, keep = set(), []
    base = size(case)
    for c in out:
        if c is None or size(c) >= base:
            continue
        key = repr(c)
        if key not in seen:
            seen.add(key)
            keep.append(c)
    return keep


def matches(failures: Sequence[Failure], signature: tuple[str, str, str]) -> bool:
    """Whether ``failures`` hold one with ``signature`` (framework, dtype, kind)."""
    return any(f.signature == signature for f in failures)


def shrink(
    name: str,
    case: Case,
    signature: tuple[str, str, str],
    checker: Checker,
    rounds: int = 60,
) -> tuple[Case, int]:
    """The smallest case found that still fails with ``signature`` (framework, dtype,
    kind), and the number of candidates run. ``checker`` runs a batch of named cases and
    returns their failures (``check.run_check`` or a fake)."""
    ran = 0
    for r in range(rounds):
        cands = candidates(case)
        if not cands:
            break
        named = [(f"{name}_s{r:02d}_{i:03d}", c) for i, c in enumerate(cands)]
        found = checker(named)
        ran += len(named)
        for n, c in named:
            if matches(found.get(n, []), signature):
                case = c
                break
        else:
            break
    return replace(case), ran
