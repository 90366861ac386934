"""The probe format: small exact checks of single operations, written as data.

Over 500 lines: the loader of one language, kept in one module so that reading a probe file
(YAML quirks, the schema, names, normalization, the checks shape inference feeds) has one
entry point; the op table is the schema and the shape rules are ``probe_shapes``.

A probe is a YAML file ``probes/{name}.yaml`` checked against ``schemas/probe.schema.yaml``
(the one place that lists the ops, their inputs and arguments, with defaults;
docs/probe-reference.md is generated from it). It names:

* *inputs*: tensors built from float64 values (explicit ``values``, ``arange`` with
  ``start``/``scale`` and ``shape``, ``ones``, ``zeros``), rounded once to the run's dtype,
  or int64 values (``dtype: int64``: indices, class targets); ``requires_grad: true`` marks
  a leaf whose gradient may be compared; values may be non-finite (``.inf``, ``-.inf``,
  ``.nan`` or the strings ``"inf"``, ``"-inf"``, ``"nan"``);
* *cases*: each a list of *steps* (layout changes such as ``transpose``, ``narrow``,
  ``broadcast_to``, ``contiguous``, and operations such as ``conv1d``), an optional scalar
  *loss* (terms ``sum``, ``sum_squares``, ``weighted_sum`` added in order), an optional
  *optimizer* (``sgd``, ``adam``, ``adamw``) run for ``steps`` iterations, and the
  *quantities* to compare: ``loss``, a tensor name (its forward values, flattened in
  row-major order), ``<input>.grad``, ``<input>.after_step``, and the optimizer's state
  ``<input>.exp_avg``, ``.exp_avg_sq``, ``.momentum_buffer``; with ``expect: error`` the
  steps are invalid and every framework must refuse them;
* optionally per case the ``exact`` values of quantities (then they are the reference for
  every framework), the values a ``known_bug`` produces (framework → device →
  quantity → values) and its own ``tolerance``.

:func:`load` validates a file and *normalizes* it: every value explicit (inputs expanded to
flat float64 lists with their shape and dtype, op arguments with their defaults, pairs as
``[h, w]``, the loss as a list of terms, the optimizer with every hyperparameter and
``optimizer_steps``), names checked, and every shape inferred (``probe_shapes``): a step
that cannot run is refused at load, naming it, unless the case expects an error. Every
interpreter reads the normalized form: PyTorch in ``probe_torch``, candle and burn in
``rust/{candle,burn}-parity/src/probe/`` through :meth:`Probe.runner_spec` (the Rust side,
``parity_common::probe_spec``, refuses unknown fields).

Which probe jobs run is :mod:`parity.probe.plan`. Pure Python (PyYAML, jsonschema): it runs
while the DAG is built. PyYAML and jsonschema are imported only to read probe files, so jobs, which
get the normalized probe as data, do not need them.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from parity.core.config import canonical_hash
from parity.core.yamlfile import _EXPONENT_NUMBER, YamlError, number_hint
from parity.plan.limits import DEFAULTS as LIMIT_DEFAULTS
from parity.probe import limits as size_limits
from parity.probe import shapes as probe_shapes
from parity.probe.ops import op_args, op_names, resolve_ref, schema, typed_value
from parity.probe.shapes_common import FLOAT, INT64, CaseShapeError

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: The dtypes a probe runs in (the training dtypes plus the half-precision ones).
PROBE_DTYPES = ("f32", "f64", "f16", "bf16")
#: Quantity suffixes: the gradient of an input, its value after the optimizer step, and the
#: optimizer's state of it (Adam/AdamW moments, the SGD momentum buffer).
GRAD, AFTER_STEP = "grad", "after_step"
EXP_AVG, EXP_AVG_SQ, MOMENTUM_BUFFER = "exp_avg", "exp_avg_sq", "momentum_buffer"
SUFFIXES = (GRAD, AFTER_STEP, EXP_AVG, EXP_AVG_SQ, MOMENTUM_BUFFER)
LOSS = "loss"
#: What a case expects: values from every framework, or an error from every one.
VALUES, ERROR = "values", "error"
#: Non-finite values as the runners' JSON writes them (``"inf"``, ``"-inf"``, ``"nan"``).
NON_FINITE_TEXT = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
#: Keys whose values stay text even when they look like a number.
_TEXT_KEYS = ("description", "note")


class ProbeError(ValueError):
    """A probe file that cannot run; the message names the file and the field."""

    def __init__(self, path: str | Path, field: str, problem: str):
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.field = field
        self.problem = problem


def parse_quantity(q: str) -> tuple[str, str | None]:
    """Split a quantity: ``"w.grad"`` → ``("w", "grad")``, ``"y"`` → ``("y", None)``."""
    name, _, suffix = q.partition(".")
    return name, suffix or None


def _field(path: Iterable) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


@cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def _validate(path: Path, doc: Any, coerced: Mapping[tuple, str]) -> None:
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if err is None:
        return
    message = err.message
    if err.validator in ("oneOf", "anyOf") and err.schema.get("description"):
        message = f"not valid here: {' '.join(err.schema['description'].split())}"
    where = tuple(err.absolute_path)
    hint = number_hint(err.instance)
    if where in coerced:
        hint = (
            f"written {coerced[where]!r}, which YAML 1.1 reads as text; it is taken as the "
            f"number {err.instance!r}, which is not valid here"
        )
    if hint:
        message = f"{message}: {hint}"
    raise ProbeError(path, _field(where), message)


def _coerce(doc: Any) -> tuple[Any, dict[tuple, str]]:
    """A copy of ``doc`` with every text that YAML 1.1 leaves as text but that is a number in
    exponent form (``1e-6``) made that number (an integer when integral), except under
    ``description`` and ``note``, and the strings ``"inf"``, ``"-inf"``, ``"nan"`` of input
    values made floats. Returns the copy and the key path → original text of each."""
    coerced: dict[tuple, str] = {}

    def walk(node: Any, at: tuple) -> Any:
        if isinstance(node, Mapping):
            return {
                k: (v if k in _TEXT_KEYS and isinstance(v, str) else walk(v, (*at, k)))
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [walk(v, (*at, i)) for i, v in enumerate(node)]
        if isinstance(node, str):
            if _EXPONENT_NUMBER.match(node.strip()):
                value = float(node)
                coerced[at] = node
                return int(value) if value.is_integer() and abs(value) < 2**53 else value
            if node in NON_FINITE_TEXT and len(at) > 2 and at[0] == "inputs" and at[2] == "values":
                return NON_FINITE_TEXT[node]
        return node

    return walk(doc, ()), coerced


def _unknown_ops(path: Path, doc: Any) -> None:
    """Refuse a step naming an op that does not exist, with the nearest valid op."""
    cases = doc.get("cases") if isinstance(doc, Mapping) else None
    if not isinstance(cases, Mapping):
        return
    ops = op_names()
    for cname, case in cases.items():
        steps = case.get("steps") if isinstance(case, Mapping) else None
        for i, step in enumerate(steps if isinstance(steps, list) else []):
            if not isinstance(step, Mapping) or len(step) != 1:
                continue
            (op,) = step
            if op in ops:
                continue
            near = difflib.get_close_matches(str(op), ops, n=1)
            maybe = f"did you mean {near[0]!r}? " if near else ""
            raise ProbeError(
                path,
                f"cases.{cname}.steps[{i}]",
                f"unknown op {op!r}; {maybe}the ops are {', '.join(ops)}",
            )


# ----- normalization -------------------------------------------------------------------


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


def _input(path: Path, name: str, spec: Mapping) -> dict:
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


def _optimizer(path: Path, field: str, given: Mapping) -> tuple[dict, int]:
    """The normalized optimizer (every hyperparameter) and its number of steps."""
    ((name, settings),) = [(k, v) for k, v in given.items() if k != "steps"]
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


def _tolerance(given: Mapping | None, base: Mapping[str, float] | None = None) -> dict:
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


def _case(
    path: Path,
    name: str,
    case: Mapping,
    inputs: Mapping[str, dict],
    tolerance: Mapping[str, float],
    limits: Mapping[str, Any],
) -> dict:
    field = f"cases.{name}"
    known = set(inputs)
    steps = [_step(path, f"{field}.steps[{i}]", s, known) for i, s in enumerate(case["steps"])]
    loss = _loss(path, f"{field}.loss", case.get("loss"), known)
    optimizer, optimizer_steps = None, 1
    if "optimizer" in case:
        optimizer, optimizer_steps = _optimizer(path, f"{field}.optimizer", case["optimizer"])
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
        "tolerance": _tolerance(case.get("tolerance"), tolerance),
        "steps": steps,
        "loss": loss,
        "optimizer": optimizer,
        "optimizer_steps": optimizer_steps,
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
    if n > 1:
        for q, (shape, _) in probe_shapes.infer_case(list(inputs.values()), case).items():
            if math.prod(shape) > most:
                raise ProbeError(
                    path,
                    f"{field}.optimizer.steps",
                    f"{q} stacked over {n} steps holds {math.prod(shape)} elements, more than "
                    f"limits.max_probe_tensor_elements ({most})",
                )


def _runner_value(v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


@dataclass(frozen=True)
class Probe:
    """A validated, normalized probe file."""

    name: str
    #: Normalized form: probe, description, tolerance {f32, f64, f16, bf16}, inputs (list),
    #: cases (list; each with expect and its resolved tolerance).
    spec: dict
    #: The file it was read from ("" when rebuilt from a job's params).
    path: str = ""

    @property
    def hash(self) -> str:
        """Canonical hash of the normalized probe (comments and layout do not count)."""
        return canonical_hash(self.spec)

    @property
    def cases(self) -> list[dict]:
        """The normalized cases, in file order."""
        return self.spec["cases"]

    def case(self, name: str) -> dict:
        """One normalized case. Raises ``KeyError`` if none has this name."""
        for c in self.cases:
            if c["name"] == name:
                return c
        raise KeyError(f"probe {self.name} has no case {name!r}")

    def quantities(self) -> list[tuple[str, str]]:
        """Every (case, quantity) a run reports, in table order."""
        return [(c["name"], q) for c in self.cases for q in c["compare"]]

    def quantity_shapes(self, case: str | Mapping) -> dict[str, tuple[list[int], str]]:
        """Quantity → (shape, kind ``"float"``/``"int64"``) of a case (its name or its
        normalized dict), as ``probe_shapes.infer_case`` infers them (``[n, ...]`` with n
        optimizer steps > 1). Raises ``CaseShapeError`` for a case that
        expects an error."""
        c = self.case(case) if isinstance(case, str) else case
        return probe_shapes.infer_case(self.spec["inputs"], c)

    def tolerance(self, dtype: str) -> float:
        """The probe's relative tolerance in ``dtype`` (0: exact); a quantity's absolute
        tolerance is ``closeness.scaled_tolerance`` of it."""
        return float(self.spec["tolerance"][dtype])

    def case_tolerance(self, case: str | Mapping, dtype: str) -> float:
        """The relative tolerance of one case (its name or its normalized dict) in
        ``dtype``: the case's own ``tolerance`` where it gives one for ``dtype``, else the
        probe's."""
        c = self.case(case) if isinstance(case, str) else case
        return float(c.get("tolerance", self.spec["tolerance"])[dtype])

    def as_params(self) -> dict:
        """Plain data for a job's ``params``: ``Probe(**probe.as_params())`` rebuilds it."""
        return {"name": self.name, "spec": self.spec}

    def runner_spec(self, dtype: str, device: str) -> dict:
        """The JSON a Rust runner reads (``parity_common::probe_spec::ProbeSpec``): inputs
        (non-finite values as ``"inf"``, ``"-inf"``, ``"nan"``) and per case ``name``,
        ``steps``, ``loss``, ``optimizer``, ``optimizer_steps``, ``compare``.

        Only what the computation needs: reference values, known bugs, notes, ``expect``
        and tolerances stay here.
        """
        inputs = copy.deepcopy(self.spec["inputs"])
        for i in inputs:
            i["values"] = [_runner_value(v) for v in i["values"]]
        keys = ("name", "steps", "loss", "optimizer", "optimizer_steps", "compare")
        return {
            "probe": self.name,
            "dtype": dtype,
            "device": device,
            "inputs": inputs,
            "cases": [{k: copy.deepcopy(c[k]) for k in keys} for c in self.cases],
        }


def parse(path: str | Path, doc: Any, limits: Mapping[str, Any] | None = None) -> Probe:
    """Validate and normalize a parsed probe document read from ``path``.

    Numbers written in exponent form without a dot (``1e-6``, text in YAML 1.1) are read
    as numbers, and ``"inf"``, ``"-inf"``, ``"nan"`` in input values as non-finite floats.
    Besides the schema, every number outside input values must be finite and every tensor
    (input, op output, scratch buffer, stacked quantity) within ``limits``
    (``limits.settings``; default ``limits.DEFAULTS``), estimated before anything is
    allocated (``limits.check_probe``, then the inferred shapes). Raises
    :class:`ProbeError` naming the file and the field.
    """
    path = Path(path)
    lim = limits or LIMIT_DEFAULTS
    name = path.name.removesuffix(".yaml")
    if not NAME.match(name):
        raise ProbeError(path, "", f"file name {name!r} must match {NAME.pattern} plus .yaml")
    doc, coerced = _coerce(doc)
    _unknown_ops(path, doc)
    _validate(path, doc, coerced)
    try:
        size_limits.check_probe(doc, lim)
    except size_limits.LimitError as e:
        raise ProbeError(path, e.field, e.problem) from None
    inputs = {n: _input(path, n, s) for n, s in doc["inputs"].items()}
    tolerance = _tolerance(doc.get("tolerance"))
    spec = {
        "probe": name,
        "description": " ".join(doc["description"].split()),
        "tolerance": tolerance,
        "inputs": list(inputs.values()),
        "cases": [_case(path, n, c, inputs, tolerance, lim) for n, c in doc["cases"].items()],
    }
    return Probe(name, spec, str(path))


def load(path: str | Path, limits: Mapping[str, Any] | None = None) -> Probe:
    """Read, validate and normalize a probe file.

    The file is read by ``yamlfile.load`` (libyaml's safe loader: the probe files are read
    every time the DAG is built), which refuses a file over ``limits.max_yaml_bytes``
    before parsing it, a key given twice, and a document of more than
    ``limits.max_yaml_nodes`` values. Raises :class:`ProbeError` naming the file and the
    field: unreadable file or YAML, an unknown op (with the nearest one), a schema
    violation, a non-finite number outside input values, a tensor beyond the limits, a
    name used before it is defined, a quantity that does not exist, a step whose shapes or
    kinds do not fit (``probe_shapes``), a case expecting an error whose steps are valid,
    reference values whose count or nesting differ from the quantity's shape.
    """
    from parity.core import yamlfile

    lim = limits or LIMIT_DEFAULTS
    path = Path(path)
    try:
        doc = yamlfile.load(path, lim["max_yaml_bytes"], lim["max_yaml_nodes"])
    except YamlError as e:
        raise ProbeError(path, "", e.problem) from e
    return parse(path, doc, lim)


def discover(
    folder: str | Path,
    select: Sequence[str] | None = None,
    limits: Mapping[str, Any] | None = None,
) -> dict[str, Probe]:
    """The probes of ``folder`` (every ``*.yaml``, or only ``select``), by name, sorted,
    each read within ``limits`` (:func:`load`).

    Raises :class:`ProbeError` for a missing folder or selected probe, or a malformed file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ProbeError(folder, "", "the probes folder does not exist")
    names = sorted(p.name.removesuffix(".yaml") for p in folder.glob("*.yaml"))
    if select is not None:
        missing = [s for s in select if s not in names]
        if missing:
            raise ProbeError(folder, "", f"selected probe {missing[0]!r} has no file here")
        names = [n for n in names if n in select]
    return {n: load(folder / f"{n}.yaml", limits) for n in names}
