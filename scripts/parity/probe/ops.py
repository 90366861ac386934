"""The probe language's op table, read from its schema (``schemas/probe.schema.yaml``):
every op's arguments with their defaults, which function runs it in each framework, and
the normalized arguments a step's as written become (:func:`op_args`). Shape inference
(:mod:`parity.probe.shapes`), the size limits (:mod:`parity.probe.limits`), the loader
(:mod:`parity.probe.format`) and the fuzzer read ops through here."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "schemas" / "probe.schema.yaml"


@cache
def schema() -> dict:
    """The probe JSON schema (``schemas/probe.schema.yaml``), parsed once."""
    from parity.core import yamlfile

    return yamlfile.load(SCHEMA_PATH)


def resolve_ref(node: Mapping) -> Mapping:
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


def op_schema(op: str) -> dict:
    """The schema node of ``op`` (description, ``x-inputs``, ``x-support``, arguments)."""
    return schema()["$defs"]["ops"][op]


def op_arguments(op: str) -> dict[str, dict]:
    """The arguments of ``op`` (not ``in``/``out``), each with its schema node resolved."""
    props = op_schema(op)["properties"]
    return {k: dict(resolve_ref(v)) for k, v in props.items() if k not in ("in", "out")}


def op_defaults(op: str) -> dict[str, Any]:
    """The ``default`` of every argument of ``op`` that has one, from the schema."""
    return {k: v["default"] for k, v in op_arguments(op).items() if "default" in v}


def op_support(op: str) -> dict[str, str]:
    """Framework → the function that runs ``op`` (``x-support``; "unsupported: …" where its
    API lacks the op, "…; unsupported: …" where it lacks an argument)."""
    return dict(op_schema(op)["x-support"])


def op_args(op: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The normalized arguments of ``op`` from the ones a step gives (``in``/``out``
    ignored): every argument explicit (schema defaults, ``x-default-from``), pairs as
    ``[h, w]`` (``x-pair``), renamed (``x-normalized-as``: reductions' ``dim`` → ``dims``,
    a list or None), integers as ``int`` and numbers as ``float``. ``given`` must have
    passed the schema."""
    spec = op_arguments(op)
    out: dict[str, Any] = {}
    for arg, node in spec.items():
        if arg in given:
            value = given[arg]
        elif "x-default-from" in node:
            value = given.get(node["x-default-from"], op_defaults(op).get(node["x-default-from"]))
        else:
            value = node.get("default")
        value = typed_value(value, node)
        if node.get("x-pair"):
            value = [value, value] if isinstance(value, int) else list(value)
        if node.get("x-normalized-as") == "dims" and value is not None:
            value = [value] if isinstance(value, int) else list(value)
        out[node.get("x-normalized-as", arg)] = value
    return out


def typed_value(value: Any, node: Mapping) -> Any:
    """Integral floats as ``int`` (a runner's ``usize`` refuses ``1.0``), numbers of a
    ``type: number`` argument as ``float``."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [typed_value(v, node) for v in value]
    if node.get("type") == "number":
        return float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
