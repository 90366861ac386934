"""Normalization of a probe document that passed the schema: every value explicit, so
every interpreter reads one form (``Probe.spec``).

Inputs are expanded to flat float64 lists with their shape and dtype, op arguments given
their defaults (``ops.op_args``), pairs written ``[h, w]``, the loss a list of terms, the
optimizer every hyperparameter with ``optimizer_steps``, ``accumulate``, the micro-batch
names and the gradient transforms; names are checked (an input or an
earlier step's ``out``), each compared quantity must exist, and every shape is inferred
(``probe_shapes.infer_case``): a step that cannot run is refused naming it, unless the
case expects an error, and so is a tensor beyond ``limits.max_probe_tensor_elements``.
Reference values (``exact``, ``known_bug``) are checked against the quantity's shape.
Every refusal is a ``ProbeError`` naming the file and the field. Reading the file is
``parity.probe.loader``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parity.probe.format import (
    AFTER_STEP,
    ERROR,
    EXP_AVG,
    EXP_AVG_SQ,
    GRAD,
    LOSS,
    MOMENTUM_BUFFER,
    PROBE_DTYPES,
    VALUES,
    ProbeError,
    parse_quantity,
)
from parity.probe.ops import op_args, resolve_ref, schema, typed_value
from parity.probe.shapes import table as probe_shapes
from parity.probe.shapes.common import FLOAT, INT64, CaseShapeError


def _flatten(path: Path, field: str, nested: Any) -> tuple[list[float], list[int]]:
    """Flatten a nested list of numbers row-major; returns (values, shape). Refuses ragged lists."""
    if not isinstance(nested, list):
        return [float(nested)], []
    if not nested:
        return [], [0]
    parts = [_flatten(path, f"{field}[{i}]", x) for i, x in enumerate(nested)]
    shape = parts[0][1]
    for i, (_, s) in enumerate(parts):
        if s != shape:
            raise ProbeError(path, f"{field}[{i}]", f"ragged list: shape {s} after {shape}")
    return [v for vals, _ in parts for v in vals], [len(nested), *shape]


def normalize_input(path: Path, name: str, spec: Mapping) -> dict:
    """Input ``name`` of the probe file ``path`` as written (``spec``: ``values``,
    ``arange``, ``ones`` or ``zeros``, ``dtype``, ``requires_grad``), normalized: ``name``,
    ``dtype`` (``float``/``int64``), ``shape`` (ints), ``values`` (flat, row-major Python
    floats, non-finite kept) and ``requires_grad``. Raises :class:`ProbeError` for the name
    ``loss``, a shape that does not hold the values, a ragged list, or an int64 input with a
    gradient or non-integer values."""
    field = f"inputs.{name}"
    if name == LOSS:
        raise ProbeError(path, field, "'loss' names the scalar loss; pick another name")
    shape = spec.get("shape")
    if "values" in spec:
        values, nested_shape = _flatten(path, f"{field}.values", spec["values"])
        if shape is None:
            shape = nested_shape
        elif math.prod(shape) != len(values):
            raise ProbeError(
                path,
                f"{field}.shape",
                f"shape {shape} holds {math.prod(shape)} values but {len(values)} are given",
            )
    elif "arange" in spec:
        start = float(spec["arange"].get("start", 0))
        scale = float(spec["arange"].get("scale", 1))
        values = [start + scale * i for i in range(math.prod(shape))]
    elif "ones" in spec:
        shape = spec["ones"]
        values = [1.0] * math.prod(shape)
    else:
        shape = spec["zeros"]
        values = [0.0] * math.prod(shape)
    dtype = spec.get("dtype", FLOAT)
    requires_grad = bool(spec.get("requires_grad", False))
    if dtype == INT64:
        if requires_grad:
            raise ProbeError(
                path, f"{field}.requires_grad", "an int64 input has no gradient; remove it"
            )
        for i, v in enumerate(values):
            if not (math.isfinite(v) and v.is_integer()):
                raise ProbeError(
                    path,
                    f"{field}.values",
                    f"value {i} ({v!r}) of an int64 input is not an integer",
                )
    return {
        "name": name,
        "dtype": dtype,
        "shape": [int(n) for n in shape],
        "values": values,
        "requires_grad": requires_grad,
    }


def _names(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _step(path: Path, field: str, step: Mapping, known: set[str]) -> dict:
    ((op, spec),) = step.items()
    args = op_args(op, spec)
    inputs = _names(spec["in"])
    for i, n in enumerate(inputs):
        if n not in known:
            raise ProbeError(
                path, f"{field}.{op}.in[{i}]", f"{n!r} is not an input or an earlier step's out"
            )
    out = spec["out"]
    if out == LOSS:
        raise ProbeError(path, f"{field}.{op}.out", "'loss' names the scalar loss")
    if out in known:
        raise ProbeError(path, f"{field}.{op}.out", f"{out!r} is already defined")
    if op == "softmax" and args["candle"] == "fused" and args["dim"] != -1:
        raise ProbeError(
            path,
            f"{field}.{op}.dim",
            "candle's fused softmax (softmax_last_dim) works over the last dimension only; "
            "use dim: -1 or candle: slow",
        )
    known.add(out)
    return {"out": out, "inputs": inputs, "op": {"name": op, **args}}


def _loss(path: Path, field: str, loss: Any, known: set[str]) -> list[dict] | None:
    if loss is None:
        return None
    terms = loss if isinstance(loss, list) else [loss]
    out = []
    for i, term in enumerate(terms):
        ((kind, arg),) = term.items()
        names = _names(arg)
        for n in names:
            if n not in known:
                raise ProbeError(path, f"{field}[{i}].{kind}", f"{n!r} is not defined")
        if kind == "weighted_sum":
            out.append({"kind": kind, "input": names[0], "weights": names[1]})
        else:
            out.append({"kind": kind, "input": names[0]})
    return out


#: The keys of a case's ``optimizer`` besides the optimizer's name.
LOOP_KEYS = ("steps", "accumulate", "micro_batches", "grad")


def _optimizer(path: Path, field: str, given: Mapping) -> tuple[dict, int]:
    """The normalized optimizer (every hyperparameter) and its number of steps."""
    ((name, settings),) = [(k, v) for k, v in given.items() if k not in LOOP_KEYS]
    node = schema()["$defs"]["optimizers"][name]
    out: dict[str, Any] = {"name": name}
    for arg, spec in node["properties"].items():
        spec = resolve_ref(spec)
        value = settings.get(arg, spec.get("default"))
        out[arg] = [float(v) for v in value] if arg == "betas" else typed_value(value, spec)
    if name == "sgd" and out["nesterov"] and (out["momentum"] <= 0 or out["dampening"] != 0):
        raise ProbeError(
            path,
            f"{field}.sgd.nesterov",
            "Nesterov momentum needs a momentum above 0 and dampening 0 (PyTorch refuses it)",
        )
    return out, int(given.get("steps", 1))


def _accumulation(
    path: Path, field: str, given: Mapping, inputs: Mapping[str, dict], steps: int
) -> dict:
    """The loop keys of an ``optimizer`` (``field``) besides ``steps``, normalized:
    ``accumulate`` (k, micro-steps per optimizer step), ``micro_batches`` (a list of
    ``{"name", "input"}``: ``name`` is row m of ``input`` at micro-step m) and
    ``grad_transforms`` (a list of ``{"kind": "scale", "factor"}``, ``{"kind":
    "clip_norm", "max_norm"}``, ``{"kind": "clip_value", "clip_value"}``, ``{"kind":
    "replace", "input", "values"}`` with every value, flat, row-major). Raises
    :class:`ProbeError` naming the key: a bound name that is taken, a micro-batch source
    that is not an input without requires_grad of rank 2 or more with steps·accumulate
    rows, a replaced gradient of an input without requires_grad or values of another
    shape."""
    k = int(given.get("accumulate", 1))
    micro = []
    for name, source in given.get("micro_batches", {}).items():
        where = f"{field}.micro_batches.{name}"
        if name == LOSS or name in inputs:
            raise ProbeError(path, where, f"{name!r} is taken (an input or the loss)")
        spec = inputs.get(source)
        if spec is None:
            raise ProbeError(path, where, f"{source!r} is not an input")
        if spec["requires_grad"]:
            raise ProbeError(path, where, f"{source!r} has requires_grad; micro-batches are data")
        shape = spec["shape"]
        if len(shape) < 2 or shape[0] != steps * k:
            raise ProbeError(
                path,
                where,
                f"{source!r} has shape {shape}; it needs rank 2 or more and steps·accumulate "
                f"= {steps}·{k} = {steps * k} rows (one per micro-step)",
            )
        micro.append({"name": name, "input": source})
    transforms = []
    for i, item in enumerate(given.get("grad", [])):
        ((kind, arg),) = item.items()
        if kind != "replace":
            key = {"scale": "factor", "clip_norm": "max_norm"}.get(kind, kind)
            transforms.append({"kind": kind, key: float(arg)})
            continue
        for name, value in arg.items():
            where = f"{field}.grad[{i}].replace.{name}"
            spec = inputs.get(name)
            if spec is None or not spec["requires_grad"]:
                raise ProbeError(path, where, f"{name!r} is not an input with requires_grad")
            values = _values(path, where, value, spec["shape"], FLOAT)
            flat = values.get("values") or [values["fill"]] * math.prod(spec["shape"])
            transforms.append({"kind": kind, "input": name, "values": flat})
    return {"accumulate": k, "micro_batches": micro, "grad_transforms": transforms}


def normalize_tolerance(given: Mapping | None, base: Mapping[str, float] | None = None) -> dict:
    """The relative tolerance of every dtype of :data:`PROBE_DTYPES` (floats): ``given``'s
    where it names the dtype, else ``base``'s (a file's, for a case), else 0 (exact)."""
    base = base or dict.fromkeys(PROBE_DTYPES, 0.0)
    given = given or {}
    return {d: float(given.get(d, base[d])) for d in PROBE_DTYPES}


def _values(path: Path, field: str, value: Any, shape: list[int] | None, kind: str | None) -> dict:
    """Normalized reference values: ``{"fill": v}`` for ``{fill: v}`` or one number (one
    element only), else ``{"values": [...]}``. With the quantity's ``shape`` known, the
    count (and the nesting, when nested) must match it; int64 quantities take integers."""
    numel = None if shape is None else math.prod(shape)
    if isinstance(value, Mapping):
        out = {"fill": float(value["fill"])}
        flat = [out["fill"]]
    elif not isinstance(value, list):
        if numel is not None and numel != 1:
            raise ProbeError(
                path,
                field,
                f"one number for a quantity of shape {shape} ({numel} elements): give every "
                f"value as a list, or {{fill: {value}}} for 'every element is {value}'",
            )
        out = {"fill": float(value)}
        flat = [out["fill"]]
    else:
        flat, nesting = _flatten(path, field, value)
        out = {"values": flat}
        if numel is not None:
            if len(flat) != numel:
                raise ProbeError(
                    path, field, f"{len(flat)} values for a quantity of shape {shape} ({numel})"
                )
            if len(nesting) > 1 and nesting != list(shape):
                raise ProbeError(
                    path,
                    field,
                    f"nested as {nesting}, the quantity's shape is {shape} (nest as the "
                    "shape, or give a flat list)",
                )
    if kind == INT64:
        bad = [v for v in flat if not (math.isfinite(v) and v.is_integer())]
        if bad:
            raise ProbeError(path, field, f"{bad[0]!r}: an int64 quantity has integer values")
    return out


def _quantity_problem(q: str, inputs: Mapping[str, dict], known: set, loss, optimizer) -> str:
    """Why quantity ``q`` does not exist in a case ("" when it does)."""
    base, suffix = parse_quantity(q)
    if q == LOSS:
        return "" if loss is not None else "loss is compared but the case has no loss"
    if suffix is None:
        return "" if base in known else f"{base!r} is not an input or a step's out"
    if base not in inputs or not inputs[base]["requires_grad"]:
        return f"{q}: {base!r} is not an input with requires_grad: true"
    if suffix == GRAD and loss is None:
        return f"{q} needs a loss to differentiate"
    if suffix == AFTER_STEP and optimizer is None:
        return f"{q} needs an optimizer"
    name = optimizer["name"] if optimizer else None
    if suffix in (EXP_AVG, EXP_AVG_SQ) and name not in ("adam", "adamw"):
        return f"{q}: the moments exp_avg and exp_avg_sq are Adam's and AdamW's state"
    if suffix == MOMENTUM_BUFFER and not (name == "sgd" and optimizer["momentum"] != 0):
        return f"{q}: the momentum buffer is the state of sgd with a momentum above 0"
    return ""


def normalize_case(
    path: Path,
    name: str,
    case: Mapping,
    inputs: Mapping[str, dict],
    tolerance: Mapping[str, float],
    limits: Mapping[str, Any],
) -> dict:
    """Case ``name`` of the probe file ``path`` as written (``case``), normalized against
    the file's normalized ``inputs`` (name → :func:`normalize_input`), its ``tolerance``
    (:func:`normalize_tolerance`) and ``limits`` (``limits.settings``): ``name``, ``note``,
    ``expect``, ``tolerance``, ``steps`` (``out``, ``inputs``, ``op`` with every argument),
    ``loss`` (terms), ``optimizer``, ``optimizer_steps``, ``accumulate``,
    ``micro_batches`` and ``grad_transforms`` (:func:`_accumulation`), ``compare``, ``exact`` and
    ``known_bug`` (quantity → ``{"fill": v}`` or ``{"values": [...]}``, or a known bug's
    outcome) and ``known_bug_versions``. Raises :class:`ProbeError` naming the field: an
    undefined name, a quantity that does not exist, a step whose shapes or kinds do not fit
    (unless the case expects an error; one that does must not fit), a tensor beyond the
    limits, reference values whose count or nesting differ from the quantity's shape."""
    field = f"cases.{name}"
    known = set(inputs)
    optimizer, optimizer_steps = None, 1
    loop = {"accumulate": 1, "micro_batches": [], "grad_transforms": []}
    if "optimizer" in case:
        optimizer, optimizer_steps = _optimizer(path, f"{field}.optimizer", case["optimizer"])
        loop = _accumulation(path, f"{field}.optimizer", case["optimizer"], inputs, optimizer_steps)
        known |= {m["name"] for m in loop["micro_batches"]}
    steps = [_step(path, f"{field}.steps[{i}]", s, known) for i, s in enumerate(case["steps"])]
    loss = _loss(path, f"{field}.loss", case.get("loss"), known)
    if optimizer is not None:
        if loss is None:
            raise ProbeError(path, f"{field}.optimizer", "an optimizer step needs a loss")
        if not any(i["requires_grad"] for i in inputs.values()):
            raise ProbeError(path, f"{field}.optimizer", "no input has requires_grad: true")
    for i, q in enumerate(case["compare"]):
        problem = _quantity_problem(q, inputs, known, loss, optimizer)
        if problem:
            raise ProbeError(path, f"{field}.compare[{i}]", problem)
    expect = case.get("expect", VALUES)
    normalized = {
        "name": name,
        "note": " ".join(case.get("note", "").split()),
        "expect": expect,
        "tolerance": normalize_tolerance(case.get("tolerance"), tolerance),
        "steps": steps,
        "loss": loss,
        "optimizer": optimizer,
        "optimizer_steps": optimizer_steps,
        **loop,
        "compare": list(case["compare"]),
    }
    shapes: dict[str, tuple[list[int], str]] | None
    try:
        shapes = probe_shapes.infer_case(list(inputs.values()), normalized)
    except CaseShapeError as e:
        if expect != ERROR:
            raise ProbeError(path, f"{field}.{e.field}", e.problem) from None
        shapes = None
    else:
        if expect == ERROR:
            raise ProbeError(
                path,
                f"{field}.expect",
                "expect: error, but the steps are valid (every shape fits); a case that "
                "every framework must refuse needs steps that PyTorch refuses",
            )
        _check_sizes(path, field, inputs, normalized, limits)
    compared = set(case["compare"])
    if expect == ERROR and case.get("exact"):
        raise ProbeError(path, f"{field}.exact", "a case that expects an error has no values")
    exact = {}
    for q, v in case.get("exact", {}).items():
        where = f"{field}.exact.{q}"
        if q not in compared:
            raise ProbeError(path, where, f"{q!r} is not in compare")
        exact[q] = _values(path, where, v, *(shapes[q] if shapes else (None, None)))
    known_bug: dict[str, dict[str, dict]] = {}
    known_bug_versions: dict[str, list[str]] = {}
    for fw, devices in case.get("known_bug", {}).items():
        for dev, quantities in devices.items():
            if dev == "versions":
                known_bug_versions[fw] = [str(v) for v in quantities]
                continue
            for q, v in quantities.items():
                where = f"{field}.known_bug.{fw}.{dev}.{q}"
                if q not in compared:
                    raise ProbeError(path, where, f"{q!r} is not in compare")
                known_bug.setdefault(fw, {}).setdefault(dev, {})[q] = (
                    v
                    if isinstance(v, str)
                    else _values(path, where, v, *(shapes[q] if shapes else (None, None)))
                )
    normalized["exact"] = exact
    normalized["known_bug"] = known_bug
    normalized["known_bug_versions"] = known_bug_versions
    return normalized


def _check_sizes(
    path: Path, field: str, inputs: Mapping[str, dict], case: Mapping, limits: Mapping
) -> None:
    """Refuse a case whose op outputs, scratch buffers or stacked quantities exceed
    ``limits.max_probe_tensor_elements`` (shapes inferred, nothing allocated)."""
    most = limits["max_probe_tensor_elements"]
    known = probe_shapes.tensor_shapes(list(inputs.values()), case)
    n = case["optimizer_steps"]
    for i, step in enumerate(case["steps"]):
        op = step["op"]["name"]
        args = {k: v for k, v in step["op"].items() if k != "name"}
        shape = known[step["out"]][0]
        scratch = probe_shapes.scratch_elements(op, args, [known[x][0] for x in step["inputs"]])
        for what, count in (
            (f"output shape {shape}", math.prod(shape)),
            ("im2col buffer", scratch),
        ):
            if count > most:
                raise ProbeError(
                    path,
                    f"{field}.steps[{i}].{op}",
                    f"{what} holds {count} elements, more than "
                    f"limits.max_probe_tensor_elements ({most}); nothing was allocated",
                )
    k = case.get("accumulate", 1)
    if n > 1 or k > 1:
        for q, (shape, _) in probe_shapes.infer_case(list(inputs.values()), case).items():
            if math.prod(shape) > most:
                raise ProbeError(
                    path,
                    f"{field}.optimizer.{'steps' if k == 1 else 'accumulate'}",
                    f"{q} stacked over {n} steps of {k} micro-steps holds "
                    f"{math.prod(shape)} elements, more than "
                    f"limits.max_probe_tensor_elements ({most})",
                )
