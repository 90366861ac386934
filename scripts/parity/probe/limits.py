"""What a probe file may ask for, estimated from the file as written before anything is
allocated: every input's and every op's output shape (:func:`probe_tensor_sizes`), refused
beyond the config's ``limits.max_probe_tensor_elements``, non-finite numbers outside the
inputs' values and integers too large for a runner (:func:`check_probe`). The limits and
the config half are :mod:`parity.plan.limits`. Pure Python: cheap to import."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from parity.plan.limits import large_integers, non_finite, yaml_text
from parity.probe.ops import op_args
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import ShapeError


class LimitError(ValueError):
    """A probe file beyond a limit: ``field`` is its key path, ``problem`` the reason."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _leaves(nested: Any) -> tuple[int, list[int] | None]:
    """(number of values, shape or None when ragged) of a nested list, without copying."""
    if not isinstance(nested, list):
        return 1, []
    if not nested:
        return 0, [0]
    parts = [_leaves(x) for x in nested]
    shape = parts[0][1]
    ragged = any(s != shape for _, s in parts) or shape is None
    return sum(n for n, _ in parts), None if ragged else [len(nested), *shape]


def _broadcast(a: Sequence[int], b: Sequence[int]) -> list[int] | None:
    """PyTorch's broadcast of two shapes, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y) if 1 in (x, y) else x)
    return out[::-1]


def _dim(d: int, ndim: int) -> int | None:
    d = d + ndim if d < 0 else d
    return d if 0 <= d < ndim else None


def _conv_out(size: int, k: int, args: Mapping) -> int:
    pad, stride, dil = args.get("padding", 0), args.get("stride", 1), args.get("dilation", 1)
    return max(0, (size + 2 * pad - dil * (k - 1) - 1) // stride + 1)


#: The probe ops whose output shape :func:`_op_shapes` estimates itself, from the file as
#: written; every other op of ``schemas/probe.schema.yaml`` is estimated through
#: ``probe_shapes`` with its arguments normalized (:data:`SHAPE_OPS` is all of them; a test
#: holds it equal to the schema's ops, so a new op cannot escape the size limit).
_OWN_SHAPE_OPS = frozenset(
    {
        "broadcast_to",
        "reshape",
        "contiguous",
        "relu",
        "abs",
        "softmax",
        "layer_norm",
        "transpose",
        "narrow",
        "unsqueeze",
        "squeeze",
        "bce_with_logits",
        "upsample_nearest1d",
        "upsample_nearest2d",
        "add",
        "mul",
        "linear",
        "matmul",
        "conv1d",
    }
)


#: Every probe op whose output shape :func:`_op_shapes` infers.
SHAPE_OPS = frozenset(probe_shapes.OPS)


def _inferred_shapes(op: str, args: Mapping, shapes: list) -> tuple[list[int] | None, int]:
    """(output shape, scratch elements) of an op through ``probe_shapes``, with the step's
    arguments as written normalized (``ops.op_args``); (None, 0) when they do not fit."""
    if any(s is None for s in shapes):
        return None, 0
    try:
        normalized = op_args(op, args)
        out, _ = probe_shapes.infer(op, normalized, shapes)
        return out, probe_shapes.scratch_elements(op, normalized, shapes)
    except (ShapeError, KeyError, TypeError, ValueError, IndexError):
        return None, 0  # the frameworks report inputs that do not fit as an outcome


def _op_shapes(op: str, args: Mapping, shapes: list) -> tuple[list[int] | None, int]:
    """(output shape or None when the inputs do not fit, elements of the largest
    intermediate an implementation allocates: im2col for convolutions, else 0)."""
    if op not in _OWN_SHAPE_OPS:
        return _inferred_shapes(op, args, shapes)
    a = shapes[0] if shapes else None
    if op in ("broadcast_to", "reshape"):
        return list(args["shape"]), 0
    if a is None:
        return None, 0
    if op in ("contiguous", "relu", "abs", "softmax", "layer_norm"):
        return list(a), 0
    if op == "transpose":
        d0, d1 = _dim(args["dim0"], len(a)), _dim(args["dim1"], len(a))
        if d0 is None or d1 is None:
            return None, 0
        out = list(a)
        out[d0], out[d1] = out[d1], out[d0]
        return out, 0
    if op == "narrow":
        d = _dim(args["dim"], len(a))
        return (None if d is None else [*a[:d], min(args["length"], a[d]), *a[d + 1 :]]), 0
    if op == "unsqueeze":
        d = _dim(args["dim"], len(a) + 1)
        return (None if d is None else [*a[:d], 1, *a[d:]]), 0
    if op == "squeeze":
        d = _dim(args["dim"], len(a))
        return (None if d is None else [x for i, x in enumerate(a) if i != d or x != 1]), 0
    if op == "bce_with_logits":
        return [], 0
    if op in ("upsample_nearest1d", "upsample_nearest2d"):
        size = args["size"] if isinstance(args["size"], list) else [args["size"]]
        return (list(a[:2]) + list(size) if len(a) >= 2 else None), 0
    b = shapes[1] if len(shapes) > 1 else None
    if b is None:
        return None, 0
    if op in ("add", "mul"):
        return _broadcast(a, b), 0
    if op == "linear":
        return ([*list(a[:-1]), b[0]] if a and len(b) == 2 else None), 0
    if op == "matmul":
        if not a or not b:
            return None, 0
        a2 = [1, *a] if len(a) == 1 else list(a)
        b2 = [*b, 1] if len(b) == 1 else list(b)
        batch = _broadcast(a2[:-2], b2[:-2])
        if batch is None:
            return None, 0
        out = [*batch, a2[-2], b2[-1]]
        if len(a) == 1:
            out.pop(-2)
        if len(b) == 1:
            out.pop(-1)
        return out, 0
    if op in ("conv1d", "conv2d"):
        spatial = 1 if op == "conv1d" else 2
        if len(a) != 2 + spatial or len(b) != 2 + spatial:
            return None, 0
        outs = [_conv_out(a[2 + i], b[2 + i], args) for i in range(spatial)]
        per_position = b[1] * math.prod(b[2:])
        return [a[0], b[0], *outs], a[0] * math.prod(outs) * per_position
    return None, 0


def probe_tensor_sizes(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, int]]:
    """(key path, what, elements) of every tensor a probe file makes, inferred from the
    file as written (a document that passed ``schemas/probe.schema.yaml``), nothing
    allocated: each input, each op's output (and a convolution's im2col buffer); a
    gradient has its input's size. An op whose inputs do not fit gives no estimate for its
    output (the frameworks report that as an outcome)."""
    inputs: dict[str, list[int] | None] = {}
    for name, spec in doc["inputs"].items():
        where = f"inputs.{name}"
        if "values" in spec:
            n, nested = _leaves(spec["values"])
            shape = spec.get("shape", nested)
            yield f"{where}.values", "values", n
        else:
            key = next(k for k in ("arange", "ones", "zeros") if k in spec)
            shape = spec["shape"] if key == "arange" else spec[key]
            where = f"{where}.shape" if key == "arange" else f"{where}.{key}"
        if shape is not None:
            yield where, f"shape {list(shape)}", math.prod(shape)
        inputs[name] = None if shape is None else list(shape)
    for cname, case in doc["cases"].items():
        known = dict(inputs)
        for i, step in enumerate(case["steps"]):
            ((op, args),) = step.items()
            ins = [args["in"]] if isinstance(args["in"], str) else list(args["in"])
            shape, scratch = _op_shapes(op, args, [known.get(n) for n in ins])
            where = f"cases.{cname}.steps[{i}].{op}"
            if shape is not None:
                yield where, f"output shape {shape}", math.prod(shape)
            if scratch:
                yield where, "im2col buffer", scratch
            known[args["out"]] = shape


#: Key paths of input values, where non-finite numbers are allowed.
_INPUT_VALUES = re.compile(r"^inputs\.[a-z][a-z0-9_]*\.values(\[|$)")


def check_probe(doc: Mapping[str, Any], limits: Mapping[str, int | float]) -> None:
    """Refuse a probe document (after its JSON schema) with a non-finite number outside the
    inputs' values, an integer too large for a runner, or a tensor
    beyond ``limits["max_probe_tensor_elements"]``. Raises :class:`LimitError` naming the
    first field."""
    for where, v in non_finite(doc):
        if _INPUT_VALUES.match(where):
            continue  # an input may hold ±inf and NaN (the ops' behaviour there is probed)
        raise LimitError(where, f"{yaml_text(v)} is not a finite number; every number must be")
    for where, v in large_integers(doc):
        raise LimitError(where, f"{v} is larger than 2^53: no runner takes an integer that large")
    for name, spec in doc["inputs"].items():
        if "arange" in spec:
            ar = spec["arange"]
            top = abs(ar.get("start", 0)) + abs(ar.get("scale", 1)) * math.prod(spec["shape"])
            if not math.isfinite(float(top)):
                raise LimitError(f"inputs.{name}.arange", "its values grow beyond float64")
    most = limits["max_probe_tensor_elements"]
    for where, what, n in probe_tensor_sizes(doc):
        if n > most:
            raise LimitError(
                where,
                f"{what} holds {n} elements, more than limits.max_probe_tensor_elements "
                f"({most}); nothing was allocated",
            )
