"""Concise messages for a config that fails its JSON schema (and why a number written
``1e-6`` is text: ``yamlfile.number_hint``).

Snakemake's ``validate`` reports the first error with the whole sub-schema; users need the
key path and the reason. This module re-runs the same schema with ``jsonschema`` (the
validator Snakemake itself uses) to phrase it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from parity.core import yamlfile

#: How every schema pattern ends: at the true end of the text, not before a final newline.
TRUE_END = "(?!\\n)$"


def key_path(path) -> str:
    """``experiments.a3_adamw.optimizer.betas[1]`` from a jsonschema error path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def schema_errors(config: Mapping, schema_path: str) -> list[str]:
    """Every schema violation of ``config`` as ``key.path: reason``, most specific first."""
    schema = yamlfile.load(schema_path)
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema)
    messages = []
    for err in sorted(validator.iter_errors(config), key=lambda e: -len(e.absolute_path)):
        best = jsonschema.exceptions.best_match([err])
        hint = yamlfile.number_hint(best.instance)
        message = f"{best.message}: {hint}" if hint else best.message
        if best.validator == "pattern":
            # The schemas end their patterns with (?!\n)$ (Python's $ also matches before a
            # final newline); the reader is shown the pattern as the rule it states.
            readable = best.validator_value.replace(TRUE_END, "$")
            message = f"{best.instance!r} does not match {readable!r}"
            if isinstance(best.instance, str) and "\n" in best.instance:
                message += (
                    " (it holds a line break: write it on one line, or as a folded block"
                    " scalar, `>`, which joins its lines)"
                )
            elif isinstance(best.instance, str) and control_character(best.instance):
                message += f" (it holds the control character {control_character(best.instance)})"
        if best.validator == "uniqueItems":
            message = repeated_items(best.instance)
        messages.append(f"{key_path(best.absolute_path)}: {message}")
    return messages


#: The schema's free-text type (``$defs/text``): one line, no control characters.
TEXT = "#/$defs/text"
_BREAK = re.compile(r"[\n\r]")


def fold_text(config: Any, schema: Mapping) -> list[str]:
    """Drop, in place, the final line breaks YAML's block scalars give a free-text value of
    ``config`` (where ``schema`` says ``$defs/text``: a label, a description, a note, a
    reason): ``note: >`` folds its lines into one and keeps a final line break, which is
    not part of the text. A line break inside the text (``|`` keeps them) is left for the
    schema to refuse at its key, as is any other control character. Walks ``properties``,
    ``additionalProperties``, ``patternProperties``, ``items`` and ``$ref`` into ``$defs``.
    Returns the key paths changed."""
    defs = schema.get("$defs", {})
    folded: list[str] = []

    def resolve(sub):
        while isinstance(sub, Mapping) and "$ref" in sub and sub["$ref"] != TEXT:
            sub = defs.get(sub["$ref"].rsplit("/", 1)[-1], {})
        return sub if isinstance(sub, Mapping) else {}

    def walk(node, sub, path):
        if isinstance(sub, Mapping) and sub.get("$ref") == TEXT:
            return
        sub = resolve(sub)
        if isinstance(node, Mapping):
            props = sub.get("properties", {})
            patterns = sub.get("patternProperties", {})
            for key in list(node):
                child = props.get(key)
                if child is None:
                    child = next(
                        (v for pat, v in patterns.items() if re.search(pat, str(key))), None
                    )
                if child is None and isinstance(sub.get("additionalProperties"), Mapping):
                    child = sub["additionalProperties"]
                if child is None:
                    continue
                fold(node, key, child, (*path, key))
        elif isinstance(node, list) and isinstance(sub.get("items"), Mapping):
            for i in range(len(node)):
                fold(node, i, sub["items"], (*path, i))

    def fold(parent, key, sub, path):
        value = parent[key]
        text = isinstance(sub, Mapping) and sub.get("$ref") == TEXT
        if text and isinstance(value, str) and value.endswith("\n"):
            if not _BREAK.search(value.rstrip("\n")):
                parent[key] = value.rstrip("\n")
                folded.append(key_path(path))
            return
        walk(value, sub, path)

    walk(config, schema, ())
    return folded


#: The bidirectional embeddings, overrides and isolates, which make text read other than it
#: is (a label shown reversed in a table): refused in free text like the controls.
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` as ``U+001B``: a C0 or C1 control, DEL, or
    the line and paragraph separators U+2028 and U+2029, a bidirectional override (which the
    schemas refuse in free text: :data:`BIDI`); None when it has none."""
    for ch in text:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch in "\u2028\u2029" or ch in BIDI:
            return f"U+{ord(ch):04X}"
    return None


def repeated_items(items: list) -> str:
    """The message for a list that names something twice (``uniqueItems``):
    ``'fc1.weight' is given twice (items [0] and [2]); each may be given once``."""
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        k = json.dumps(item, sort_keys=True)
        if k in seen:
            return f"{item!r} is given twice (items [{seen[k]}] and [{i}]); each may be given once"
        seen[k] = i
    return f"{items!r} has non-unique elements"


def _differing_paths(a, b, path: str = "") -> list[str]:
    """Dotted key paths where two nested configs differ (a key only one has counts)."""
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
        return [] if a == b else [path.rstrip(".") or "(the config)"]
    out = []
    for key in sorted(set(a) | set(b), key=str):
        if key not in a or key not in b:
            out.append(f"{path}{key}")
        else:
            out += _differing_paths(a[key], b[key], f"{path}{key}.")
    return out


def merge_changes(config: Mapping, defaults: Mapping, schema_path: str) -> list[str]:
    """Where the config Snakemake runs differs from ``config``, a whole config (every
    top-level key of ``defaults``) written to a file for ``--configfile``: Snakemake merges
    that file over the workflow's ``configfile`` (``defaults``, config.yaml), so a key left
    out of a section comes back with its default value. A program that replaced
    ``experiments`` with two of them would run all of them; leave an experiment out with
    ``only`` or ``enabled: false`` and update a section rather than replace it.

    Both configs are compared with the schema's defaults filled in, so leaving out a key
    whose config.yaml value is the schema's default changes nothing. Returns the dotted key
    paths that differ; [] for a config of overrides only (one lacking a top-level key of
    ``defaults``: what it leaves out is meant to stay) and for a config the schema refuses
    (the workflow refuses it, naming the key)."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import update_config, validate

    if not set(defaults) <= set(config):
        return []
    written, merged = json.loads(json.dumps(config)), json.loads(json.dumps(defaults))
    update_config(merged, json.loads(json.dumps(config)))
    for c in (written, merged):
        try:
            validate(c, schema_path, set_default=True)
        except WorkflowError:
            return []
    return _differing_paths(written, merged)
