"""The probe format: small exact checks of single operations, written as data.

A probe is a YAML file ``probes/{name}.yaml`` checked against ``schemas/probe.schema.yaml``
(the one place that lists the ops, their inputs and arguments, with defaults). It names:

* *inputs*: tensors built from float64 values (explicit ``values``, ``arange`` with
  ``start``/``scale`` and ``shape``, ``ones``, ``zeros``), rounded once to the run's dtype;
  ``requires_grad: true`` marks a leaf whose gradient may be compared;
* *cases*: each a list of *steps* (layout changes such as ``transpose``, ``narrow``,
  ``broadcast_to``, ``contiguous``, and operations such as ``conv1d``), an optional scalar
  *loss* (terms ``sum``, ``sum_squares``, ``weighted_sum`` added in order), an optional
  *optimizer* step, and the *quantities* to compare: ``loss``, a tensor name (its forward
  values, flattened in row-major order), ``<input>.grad``, ``<input>.after_step``;
* optionally per case the ``exact`` values of quantities (then they are the reference for
  every framework) and the values a ``known_bug`` produces (framework → device →
  quantity → values).

:func:`load` validates a file and *normalizes* it: every value explicit (inputs expanded to
flat float64 lists with their shape, op arguments with their defaults, the loss as a list of
terms), names checked. Every interpreter reads the normalized form: PyTorch in
``probe_torch``, candle and burn in ``rust/{candle,burn}-parity/src/probe.rs`` through
:meth:`Probe.runner_spec` (the Rust side refuses unknown fields).

Which probe jobs run is :mod:`parity.probe_plan`. Pure Python (PyYAML, jsonschema): it runs
while the DAG is built. PyYAML and jsonschema are imported only to read probe files, so jobs, which
get the normalized probe as data, do not need them.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from . import limits as size_limits
from .config import canonical_hash
from .devices import DTYPES
from .yamlfile import YamlError, number_hint

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "probe.schema.yaml"
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: Quantity suffixes: the gradient of an input, and its value after the optimizer step.
GRAD, AFTER_STEP = "grad", "after_step"
LOSS = "loss"
#: The reference of every probe without exact values: PyTorch on the CPU, same dtype.


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


@cache
def schema() -> dict:
    """The probe JSON schema (``schemas/probe.schema.yaml``), parsed once."""
    from . import yamlfile

    return yamlfile.load(SCHEMA_PATH)


def _resolve(node: Mapping) -> Mapping:
    """Follow a local ``$ref`` (``#/$defs/...``) of the probe schema, once."""
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def op_names() -> list[str]:
    """Every op a step may name, in the schema's order."""
    return list(schema()["$defs"]["step"]["properties"])


def op_defaults(op: str) -> dict[str, Any]:
    """The ``default`` of every argument of ``op`` that has one, from the schema."""
    props = schema()["$defs"]["ops"][op]["properties"]
    out = {}
    for arg, node in props.items():
        node = _resolve(node)
        if "default" in node:
            out[arg] = node["default"]
    return out


def _field(path: Iterable) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


@cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def _validate(path: Path, doc: Any) -> None:
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if err is None:
        return
    message = err.message
    if err.validator in ("oneOf", "anyOf") and err.schema.get("description"):
        message = f"not valid here: {' '.join(err.schema['description'].split())}"
    hint = number_hint(err.instance)
    if hint:
        message = f"{message}: {hint}"
    raise ProbeError(path, _field(err.absolute_path), message)


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
    return {
        "name": name,
        "shape": list(shape),
        "values": values,
        "requires_grad": bool(spec.get("requires_grad", False)),
    }


def _names(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _step(path: Path, field: str, step: Mapping, known: set[str]) -> dict:
    ((op, spec),) = step.items()
    args = {**op_defaults(op), **{k: v for k, v in spec.items() if k not in ("in", "out")}}
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


def _values(path: Path, field: str, value: Any) -> dict:
    """Normalized reference values: ``{"fill": v}`` for one number, else ``{"values": [...]}``."""
    if not isinstance(value, list):
        return {"fill": float(value)}
    return {"values": _flatten(path, field, value)[0]}


def _case(path: Path, name: str, case: Mapping, inputs: Mapping[str, dict]) -> dict:
    field = f"cases.{name}"
    known = set(inputs)
    steps = [_step(path, f"{field}.steps[{i}]", s, known) for i, s in enumerate(case["steps"])]
    loss = _loss(path, f"{field}.loss", case.get("loss"), known)
    optimizer = None
    if "optimizer" in case:
        ((opt, settings),) = case["optimizer"].items()
        optimizer = {"name": opt, **settings}
        if loss is None:
            raise ProbeError(path, f"{field}.optimizer", "an optimizer step needs a loss")
        if not any(i["requires_grad"] for i in inputs.values()):
            raise ProbeError(path, f"{field}.optimizer", "no input has requires_grad: true")
    for i, q in enumerate(case["compare"]):
        where = f"{field}.compare[{i}]"
        base, suffix = parse_quantity(q)
        if q == LOSS:
            if loss is None:
                raise ProbeError(path, where, "loss is compared but the case has no loss")
        elif suffix is None:
            if base not in known:
                raise ProbeError(path, where, f"{base!r} is not an input or a step's out")
        else:
            if base not in inputs or not inputs[base]["requires_grad"]:
                raise ProbeError(
                    path, where, f"{q}: {base!r} is not an input with requires_grad: true"
                )
            if suffix == GRAD and loss is None:
                raise ProbeError(path, where, f"{q} needs a loss to differentiate")
            if suffix == AFTER_STEP and optimizer is None:
                raise ProbeError(path, where, f"{q} needs an optimizer")
    compared = set(case["compare"])
    exact = {}
    for q, v in case.get("exact", {}).items():
        if q not in compared:
            raise ProbeError(path, f"{field}.exact.{q}", f"{q!r} is not in compare")
        exact[q] = _values(path, f"{field}.exact.{q}", v)
    known_bug: dict[str, dict[str, dict]] = {}
    for fw, devices in case.get("known_bug", {}).items():
        for dev, quantities in devices.items():
            for q, v in quantities.items():
                where = f"{field}.known_bug.{fw}.{dev}.{q}"
                if q not in compared:
                    raise ProbeError(path, where, f"{q!r} is not in compare")
                known_bug.setdefault(fw, {}).setdefault(dev, {})[q] = (
                    v if isinstance(v, str) else _values(path, where, v)
                )
    return {
        "name": name,
        "note": " ".join(case.get("note", "").split()),
        "steps": steps,
        "loss": loss,
        "optimizer": optimizer,
        "compare": list(case["compare"]),
        "exact": exact,
        "known_bug": known_bug,
    }


@dataclass(frozen=True)
class Probe:
    """A validated, normalized probe file."""

    name: str
    #: Normalized form: description, tolerance {f32, f64}, inputs (list), cases (list).
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

    def tolerance(self, dtype: str) -> float:
        """The probe's relative tolerance in ``dtype`` (0: exact); a quantity's absolute
        tolerance is ``closeness.scaled_tolerance`` of it."""
        return float(self.spec["tolerance"][dtype])

    def as_params(self) -> dict:
        """Plain data for a job's ``params``: ``Probe(**probe.as_params())`` rebuilds it."""
        return {"name": self.name, "spec": self.spec}

    def runner_spec(self, dtype: str, device: str) -> dict:
        """The JSON a Rust runner reads (``parity_common::probe_spec::ProbeSpec``).

        Only what the computation needs: reference values, known bugs and notes stay here.
        """
        return {
            "probe": self.name,
            "dtype": dtype,
            "device": device,
            "inputs": copy.deepcopy(self.spec["inputs"]),
            "cases": [
                {k: copy.deepcopy(c[k]) for k in ("name", "steps", "loss", "optimizer", "compare")}
                for c in self.cases
            ],
        }


def parse(path: str | Path, doc: Any, limits: Mapping[str, Any] | None = None) -> Probe:
    """Validate and normalize a parsed probe document read from ``path``.

    Besides the schema, every number must be finite and every tensor (input, op output)
    within ``limits`` (``limits.settings``; default ``limits.DEFAULTS``), estimated before
    anything is allocated (``limits.check_probe``). Raises :class:`ProbeError` naming the
    file and the field.
    """
    path = Path(path)
    name = path.name.removesuffix(".yaml")
    if not NAME.match(name):
        raise ProbeError(path, "", f"file name {name!r} must match {NAME.pattern} plus .yaml")
    _validate(path, doc)
    try:
        size_limits.check_probe(doc, limits or size_limits.DEFAULTS)
    except size_limits.LimitError as e:
        raise ProbeError(path, e.field, e.problem) from None
    inputs = {n: _input(path, n, s) for n, s in doc["inputs"].items()}
    tol = doc.get("tolerance", {})
    spec = {
        "probe": name,
        "description": " ".join(doc["description"].split()),
        "tolerance": {d: float(tol.get(d, 0.0)) for d in DTYPES},
        "inputs": list(inputs.values()),
        "cases": [_case(path, n, c, inputs) for n, c in doc["cases"].items()],
    }
    return Probe(name, spec, str(path))


def load(path: str | Path, limits: Mapping[str, Any] | None = None) -> Probe:
    """Read, validate and normalize a probe file.

    The file is read by ``yamlfile.load`` (libyaml's safe loader: the probe files are read
    every time the DAG is built), which refuses a file over ``limits.max_yaml_bytes``
    before parsing it, a key given twice, and a document of more than
    ``limits.max_yaml_nodes`` values. Raises :class:`ProbeError` naming the file and the
    field: unreadable file or YAML, a schema violation, a non-finite number, a tensor
    beyond the limits, a name used before it is defined, a quantity that does not exist.
    """
    from . import yamlfile

    lim = limits or size_limits.DEFAULTS
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
