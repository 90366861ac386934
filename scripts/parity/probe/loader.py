"""Reading a probe file: YAML read safely and within limits, numbers YAML 1.1 leaves as
text taken as numbers, unknown ops named with the nearest one, the schema
(``schemas/probe.schema.yaml``) checked, the size limits estimated, then the document
normalized (``parity.probe.normalize``) into a ``Probe`` (``parity.probe.format``).

Pure Python (PyYAML, jsonschema): it runs while the DAG is built. PyYAML and jsonschema are
imported only to read probe files, so jobs, which get the normalized probe as data, do not
need them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from parity.core import userpath
from parity.core.memo import Memo, probe_key
from parity.core.yamlfile import _EXPONENT_NUMBER, YamlError, number_hint
from parity.plan.limits import DEFAULTS as LIMIT_DEFAULTS
from parity.probe import limits as size_limits
from parity.probe.format import NAME, NON_FINITE_TEXT, Probe, ProbeError
from parity.probe.normalize import normalize_case, normalize_input, normalize_tolerance
from parity.probe.ops import op_names, schema

#: Keys whose values stay text even when they look like a number.
_TEXT_KEYS = ("description", "note")


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
    ``description`` and ``note``, whose every run of whitespace (YAML's folded line breaks,
    a tab) is made one space (the schema then refuses any other control character), and
    the strings ``"inf"``, ``"-inf"``, ``"nan"`` of input values made floats. Returns the
    copy and the key path → original text of each number."""
    coerced: dict[tuple, str] = {}

    def walk(node: Any, at: tuple) -> Any:
        if isinstance(node, Mapping):
            return {
                k: (
                    " ".join(v.split())
                    if k in _TEXT_KEYS and isinstance(v, str)
                    else walk(v, (*at, k))
                )
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
    inputs = {n: normalize_input(path, n, s) for n, s in doc["inputs"].items()}
    tolerance = normalize_tolerance(doc.get("tolerance"))
    spec = {
        "probe": name,
        "description": " ".join(doc["description"].split()),
        "tolerance": tolerance,
        "inputs": list(inputs.values()),
        "cases": [
            normalize_case(path, n, c, inputs, tolerance, lim) for n, c in doc["cases"].items()
        ],
    }
    return Probe(name, spec, str(path))


def load(
    path: str | Path, limits: Mapping[str, Any] | None = None, memo: Memo | None = None
) -> Probe:
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

    With ``memo`` (``parity.core.memo``), a file read and validated before, with the same
    bytes, path, limits and code, is taken from the record instead (the same ``Probe``).
    """
    lim = limits or LIMIT_DEFAULTS
    path = Path(path)
    if memo is not None:
        try:
            # Within the size limit: a larger file is refused by yamlfile.load below.
            with open(path, "rb") as f:
                data = f.read(lim["max_yaml_bytes"] + 1)
        except OSError:
            data = None  # yamlfile.load names the problem
        if data is not None and len(data) <= lim["max_yaml_bytes"]:
            # The entry is computed from these bytes, the ones its key names.
            spec = memo.get(
                "probes", probe_key(path, data, dict(lim)), lambda: _read(path, lim, data).spec
            )
            return Probe(path.name.removesuffix(".yaml"), spec, str(path))
    return _read(path, lim)


def _read(path: Path, lim: Mapping[str, Any], data: bytes | None = None) -> Probe:
    """:func:`load` without the record: the file (or its bytes ``data``) parsed strictly
    and checked by :func:`parse`."""
    from parity.core import yamlfile

    try:
        if data is None:
            doc = yamlfile.load(path, lim["max_yaml_bytes"], lim["max_yaml_nodes"])
        else:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise YamlError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from e
            doc = yamlfile.loads(text, path, lim["max_yaml_nodes"])
    except YamlError as e:
        raise ProbeError(path, "", e.problem) from e
    return parse(path, doc, lim)


def discover(
    folder: str | Path,
    select: Sequence[str] | None = None,
    limits: Mapping[str, Any] | None = None,
    memo: Memo | None = None,
) -> dict[str, Probe]:
    """The probes of ``folder`` (every ``*.yaml``, or only ``select``), by name, sorted,
    each read within ``limits`` (:func:`load`, with ``memo``).

    Raises :class:`ProbeError` for a missing folder or selected probe, a ``*.yaml`` that is
    not a readable file (a broken or looping symbolic link, a folder, a FIFO), or a
    malformed file.
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
    for n in names:
        # a broken or looping link, a folder, a FIFO (which would block the reader) named
        # *.yaml: named as what it is, before anything opens it
        why = userpath.reason(folder / f"{n}.yaml", "file")[1]
        if why is not None:
            raise ProbeError(folder / f"{n}.yaml", "", f"not a readable probe file: {why}")
    return {n: load(folder / f"{n}.yaml", limits, memo) for n in names}
